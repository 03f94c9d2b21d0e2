package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/consumer/lane"
	"github.com/ferrylabs/ferry/internal/logging"
	ferrytenant "github.com/ferrylabs/ferry/internal/tenant"
	"github.com/ferrylabs/ferry/proto/wire"
)

// A record's way through the consumer between its fetch and its commit:
// dispatch admits it into the tracker and hands it to its tenant's lane
// and to the validators; finish, once its lane has its answer, marks it
// done in the tracker, whose watermarks the committer commits.

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

// watermarks returns the tracker's watermarks, or nil before the start
// offsets are known and while the consumer moves to a re-created topic.
func (c *Consumer) watermarks() map[int32]int64 {
	if tr := c.tracker.Load(); tr != nil && !c.following.Load() {
		return tr.watermarks()
	}
	return nil
}

// tracker keeps, per partition, the offsets fetched but not yet finished
// (acknowledged OK or as a client error) and derives the watermark from
// them. Records finish out of order, because tenants proceed in parallel;
// the watermark only moves over a prefix that is entirely finished.
type tracker struct {
	parts map[int32]*partitionTracker // fixed at construction: no lock needed
}

// partitionTracker is one partition's pending offsets in fetch order.
// Offsets are increasing but may have gaps (compaction, transaction
// markers), so they are kept explicitly rather than as a range.
type partitionTracker struct {
	mu      sync.Mutex
	offsets []int64
	done    []bool
	// stamps are the records' timestamps, for the oldest unacknowledged
	// record's age.
	stamps []time.Time
	head   int   // offsets[:head] are finished and forgotten
	next   int64 // the offset to commit: all records before it are finished
}

func newTracker(start map[int32]int64) *tracker {
	t := &tracker{parts: make(map[int32]*partitionTracker, len(start))}
	for p, next := range start {
		t.parts[p] = &partitionTracker{next: next}
	}
	return t
}

// owns reports whether p is one of the tracked partitions.
func (t *tracker) owns(p int32) bool {
	_, ok := t.parts[p]
	return ok
}

// add records that offset o of partition p, a record with timestamp ts,
// was fetched. Offsets of a partition must be added in increasing order.
func (t *tracker) add(p int32, o int64, ts time.Time) error {
	pt, ok := t.parts[p]
	if !ok {
		return fmt.Errorf("partition %d is not owned by this consumer", p)
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if n := len(pt.offsets); (n > pt.head && o <= pt.offsets[n-1]) || o < pt.next {
		return fmt.Errorf("partition %d: offset %d fetched twice or out of order", p, o)
	}
	if pt.head == len(pt.offsets) && pt.head > 0 {
		// Everything pending is finished: restart the slices cheaply.
		pt.offsets, pt.done, pt.stamps, pt.head = pt.offsets[:0], pt.done[:0], pt.stamps[:0], 0
	}
	pt.offsets = append(pt.offsets, o)
	pt.done = append(pt.done, false)
	pt.stamps = append(pt.stamps, ts)
	return nil
}

// finish marks offset o of partition p finished and advances the watermark
// over the finished prefix.
func (t *tracker) finish(p int32, o int64) {
	pt := t.parts[p]
	pt.mu.Lock()
	defer pt.mu.Unlock()
	i, found := slices.BinarySearch(pt.offsets[pt.head:], o)
	if !found {
		return // finished twice: harmless, the first call counted
	}
	pt.done[pt.head+i] = true
	for pt.head < len(pt.offsets) && pt.done[pt.head] {
		pt.next = pt.offsets[pt.head] + 1
		pt.head++
	}
	if pt.head > 1024 && pt.head > len(pt.offsets)/2 {
		// Drop the finished prefix so memory follows what is in flight.
		n := copy(pt.offsets, pt.offsets[pt.head:])
		copy(pt.done, pt.done[pt.head:])
		copy(pt.stamps, pt.stamps[pt.head:])
		pt.offsets, pt.done, pt.stamps, pt.head = pt.offsets[:n], pt.done[:n], pt.stamps[:n], 0
	}
}

// watermarks returns, per partition, the next offset to commit: every
// record before it is finished.
func (t *tracker) watermarks() map[int32]int64 {
	out := make(map[int32]int64, len(t.parts))
	for p, pt := range t.parts {
		pt.mu.Lock()
		out[p] = pt.next
		pt.mu.Unlock()
	}
	return out
}

// uncommitted returns how many records of partition p were fetched past
// its watermark, finished or not.
func (t *tracker) uncommitted(p int32) int {
	pt := t.parts[p]
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return len(pt.offsets) - pt.head
}

// pendingIn returns the number of unfinished records of partition p.
func (t *tracker) pendingIn(p int32) int {
	pt, ok := t.parts[p]
	if !ok {
		return 0
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	n := 0
	for _, d := range pt.done[pt.head:] {
		if !d {
			n++
		}
	}
	return n
}

// pending returns the number of unfinished records of all partitions.
func (t *tracker) pending() int {
	n := 0
	for _, pt := range t.parts {
		pt.mu.Lock()
		for _, d := range pt.done[pt.head:] {
			if !d {
				n++
			}
		}
		pt.mu.Unlock()
	}
	return n
}

// oldest returns, per partition, the timestamp of the oldest record
// fetched and not finished, the zero time when every fetched record is. The
// watermark waits for that record, so it is the first one not finished.
func (t *tracker) oldest() map[int32]time.Time {
	out := make(map[int32]time.Time, len(t.parts))
	for p, pt := range t.parts {
		pt.mu.Lock()
		var ts time.Time
		if pt.head < len(pt.offsets) {
			ts = pt.stamps[pt.head]
		}
		pt.mu.Unlock()
		out[p] = ts
	}
	return out
}
