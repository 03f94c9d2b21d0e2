package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/consumer/lane"
	"github.com/ferrylabs/ferry/internal/logging"
	ferrytenant "github.com/ferrylabs/ferry/internal/tenant"
	"github.com/ferrylabs/ferry/proto/wire"
)

// dispatch hands a fetched record to its tenant's lane and, unless the
// lane parks it, to the validators. It waits for room in the lanes'
// window, which is what slows fetching down.
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
	it := &lane.Item{
		Partition: rec.Partition,
		Offset:    rec.Offset,
		Timestamp: rec.Timestamp,
		Tenant:    string(rec.Key),
		Value:     rec.Value,
		Size:      len(rec.Value),
	}
	validate, err := c.lanes.Add(ctx, it, func() bool {
		if err := tr.add(rec.Partition, rec.Offset, rec.Timestamp); err != nil {
			c.logger.Error("refusing a record", "err", err)
			return false
		}
		c.metrics.fetched.WithLabelValues(strconv.Itoa(int(rec.Partition))).Inc()
		return true
	})
	if validate {
		c.validate <- it // never blocks: the window bounds items to its capacity
	}
	return err
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

// validateLoop validates items until the channel is closed. Several run at
// once, so validation overlaps with pushing.
func (c *Consumer) validateLoop() {
	for it := range c.validate {
		start := time.Now()
		c.validateItem(it)
		c.metrics.decodeDuration.Observe(time.Since(start).Seconds())
		it.Validated()
	}
}

// validateItem sets it.Skip when the record cannot be pushed.
func (c *Consumer) validateItem(it *lane.Item) {
	it.Skip = c.check(it.Tenant, it.Value)
}

// check validates a record: its key, its size, and its value's wire
// structure (wire.ValidateWriteRequest), without building the request. The
// original bytes are what goes on the stream; the pusher decodes them.
// Metric and label names are the pusher's to judge, under its
// -limits.name-validation-scheme, series by series: one bad series must
// not cost the record's good ones.
func (c *Consumer) check(tenant string, value []byte) *lane.Skip {
	switch {
	case tenant == "":
		return &lane.Skip{Cause: "empty_key", Reason: "empty record key: the key must be the tenant ID"}
	case len(value) > c.cfg.MaxRequestBytes:
		return &lane.Skip{Cause: "too_large", Reason: fmt.Sprintf("record value of %d bytes is larger than -pusher.max-request-bytes=%d", len(value), c.cfg.MaxRequestBytes)}
	}
	if err := ferrytenant.Validate(tenant); err != nil {
		return &lane.Skip{Cause: "invalid_tenant", Reason: "record key: " + err.Error()}
	}
	if err := wire.ValidateWriteRequest(value); err != nil {
		if errors.Is(err, wire.ErrRefused) {
			return &lane.Skip{Cause: "refused", Reason: "record value refused: " + err.Error()}
		}
		return &lane.Skip{Cause: "undecodable", Reason: "record value is not a remote-write WriteRequest: " + err.Error()}
	}
	return nil
}

// skip writes a record that is a client error to the dead-letter topic
// when there is one, then counts and logs it; its lane then finishes it,
// and it will be committed past. A dead-letter write that fails is retried
// like a server error; until it succeeds the record is not finished.
func (c *Consumer) skip(ctx context.Context, it *lane.Item, cause, reason string) bool {
	if c.cfg.DLQTopic != "" && !c.deadLetter(ctx, it, cause, reason) {
		return false
	}
	c.metrics.clientErrors.WithLabelValues(cause).Inc()
	c.stats.skipped.Add(1)
	if c.clientLogs.Allowed("") {
		c.logger.Warn("skipping record: client error", "tenant", logging.Untrusted(it.Tenant), "partition", it.Partition,
			"offset", it.Offset, "cause", cause, "reason", logging.Untrusted(reason))
	}
	return true
}

// finish marks an item acknowledged: its offset may now be committed. Its
// tenant goes into the next Sync first: an answer other than OK may have
// applied part of the request too, and naming a tenant with nothing to
// sync costs the pusher nothing.
func (c *Consumer) finish(it *lane.Item) {
	c.toSync.add(it.Tenant)
	c.tracker.Load().finish(it.Partition, it.Offset)
	if !it.Timestamp.IsZero() {
		c.metrics.latency.Observe(time.Since(it.Timestamp).Seconds())
	}
}

func (c *Consumer) countAck(status string) {
	c.metrics.ack(status).Inc()
	c.stats.countAck(status)
}
