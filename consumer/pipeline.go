package consumer

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/proto/wire"
)

// item is one record on its way through the consumer.
type item struct {
	partition int32
	offset    int64
	timestamp time.Time
	tenant    string
	value     []byte // sent as it came, once decoding validated it
	size      int    // bytes of the value, held in the window unless parked
	sequence  uint64 // its place in its tenant's requests, given when first sent
	// parked is set while the value is dropped from memory and the item
	// holds no window room: its tenant is being retried and the record
	// will be read from Kafka again when its turn comes.
	parked bool

	decoded chan struct{} // closed by the decoder
	skip    *skipped      // set when the record cannot be pushed at all
}

// park drops the item's value; the caller gives its window room back.
func (it *item) park() {
	it.parked = true
	it.value = nil
	it.skip = nil
}

// skipped describes a record that is a client error before it reaches the
// pusher: retrying cannot make it valid.
type skipped struct {
	cause  string
	reason string
}

// dispatch hands a fetched record to its lane and to the decoders. It
// waits for room in the window, which is what slows fetching down.
func (c *Consumer) dispatch(ctx context.Context, rec *kgo.Record) error {
	tr := c.tracker.Load()
	if !tr.owns(rec.Partition) {
		c.metrics.foreign.Inc()
		c.logger.Error("refusing a record of a partition this consumer does not own", "partition", rec.Partition, "offset", rec.Offset)
		return nil
	}
	if err := c.waitForWatermark(ctx, tr, rec.Partition); err != nil {
		return err
	}
	it := &item{
		partition: rec.Partition,
		offset:    rec.Offset,
		timestamp: rec.Timestamp,
		tenant:    string(rec.Key),
		value:     rec.Value,
		size:      len(rec.Value),
		decoded:   make(chan struct{}),
	}
	// A record of a tenant being retried, beyond its share, takes no
	// window room: it is parked (see park.go).
	parked := c.lanes.crowded(it.tenant, c.cfg.RetryingTenantRecords)
	if !parked {
		if err := c.window.acquire(ctx, it.size); err != nil {
			return err
		}
	}
	if err := tr.add(rec.Partition, rec.Offset); err != nil {
		if !parked {
			c.window.release(it.size)
		}
		c.logger.Error("refusing a record", "err", err)
		return nil
	}
	c.metrics.fetched.WithLabelValues(strconv.Itoa(int(rec.Partition))).Inc()
	if parked {
		c.parkFetched(it)
		return nil
	}
	c.lanes.enqueue(it.tenant, it)
	c.decode <- it // never blocks: the window bounds items to its capacity
	return nil
}

// waitForWatermark waits while partition p is -consumer.max-uncommitted-records
// ahead of its watermark. The window only counts records not yet
// acknowledged; without this bound, a record that keeps failing would let
// the other tenants run ahead indefinitely, and a crash would replay all of
// it. The wait is rare and short-lived, so polling is enough.
func (c *Consumer) waitForWatermark(ctx context.Context, tr *tracker, p int32) error {
	logged := false
	for tr.uncommitted(p) >= c.cfg.MaxUncommitted {
		if !logged {
			c.logger.Warn("partition is too far ahead of its watermark: fetching pauses until the oldest record is acknowledged",
				"partition", p, "watermark", tr.watermarks()[p], "uncommitted", tr.uncommitted(p))
			logged = true
		}
		sleep(ctx, 20*time.Millisecond)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// decodeLoop decodes items until the decode channel is closed. Several run
// at once, so decoding overlaps with pushing.
func (c *Consumer) decodeLoop() {
	for it := range c.decode {
		start := time.Now()
		c.decodeItem(it)
		c.metrics.decodeDuration.Observe(time.Since(start).Seconds())
		close(it.decoded)
	}
}

// decodeItem validates a record: its key, its size, and its value's wire
// structure (wire.ValidateWriteRequest), without building the request. The
// original bytes are what goes on the stream; the pusher decodes them.
func (c *Consumer) decodeItem(it *item) {
	switch {
	case it.tenant == "":
		it.skip = &skipped{cause: "empty_key", reason: "empty record key: the key must be the tenant ID"}
		return
	case len(it.value) > c.cfg.MaxRequestBytes:
		it.skip = &skipped{cause: "too_large", reason: fmt.Sprintf("record value of %d bytes is larger than -pusher.max-request-bytes=%d", len(it.value), c.cfg.MaxRequestBytes)}
		return
	}
	if err := wire.ValidateWriteRequest(it.value); err != nil {
		it.skip = &skipped{cause: "undecodable", reason: "record value is not a remote-write WriteRequest: " + err.Error()}
	}
}

// skip writes a record that is a client error to the dead-letter topic
// when there is one, then counts and logs it and finishes it: it will be
// committed past. A dead-letter write that fails is retried like a server
// error; until it succeeds the record is not finished.
func (c *Consumer) skip(ctx context.Context, it *item, cause, reason string) {
	if c.cfg.DLQTopic != "" && !c.deadLetter(ctx, it, cause, reason) {
		return
	}
	c.metrics.clientErrors.WithLabelValues(cause).Inc()
	c.stats.skipped.Add(1)
	if c.clientLogs.allow() {
		c.logger.Warn("skipping record: client error", "tenant", it.tenant, "partition", it.partition,
			"offset", it.offset, "cause", cause, "reason", reason)
	}
	c.finish(it)
}

// finish marks an item acknowledged: its offset may now be committed.
func (c *Consumer) finish(it *item) {
	c.tracker.Load().finish(it.partition, it.offset)
	if !it.parked {
		c.window.release(it.size)
	}
	if !it.timestamp.IsZero() {
		c.metrics.latency.Observe(time.Since(it.timestamp).Seconds())
	}
	it.value = nil
}

func (c *Consumer) countAck(status string) {
	c.metrics.acks.WithLabelValues(status).Inc()
	c.stats.countAck(status)
}
