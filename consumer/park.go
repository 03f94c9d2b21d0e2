package consumer

import (
	"context"
	"time"
)

// A tenant whose requests keep failing must not stall the others. Its
// lane is then "retrying", and its records beyond
// -consumer.retrying-tenant-records are parked: their values are dropped
// and their window room given back, so fetching goes on for everyone
// else. The parked records stay in the tracker (the watermark waits for
// them) and are read from Kafka again, in order, when the lane reaches
// them. Memory stays bounded by the window; a parked record costs its
// metadata, and -consumer.max-uncommitted-records bounds how many there are.

// parkFetched hands a record of a tenant being retried to its lane
// without its value, so the tenant cannot fill the window and stall the
// others; the lane reads it again from Kafka when its turn comes. It is
// decoded then, not now.
func (c *Consumer) parkFetched(it *item) {
	c.metrics.parked.Inc()
	it.park()
	close(it.decoded)
	c.lanes.enqueue(it.tenant, it)
}

// reread fills in the values of parked items, all of one partition, from
// Kafka, retrying with backoff until it succeeds or ctx is done, and
// decodes them. A record that is no longer in the log (retention deleted
// it while it was parked) becomes a client error: it cannot be pushed.
func (c *Consumer) reread(ctx context.Context, batch []*item) error {
	offsets := make([]int64, len(batch))
	for i, it := range batch {
		offsets[i] = it.offset
	}
	p := batch[0].partition
	var values map[int64][]byte
	for attempt := 0; ; attempt++ {
		var err error
		values, _, err = c.refetch.read(ctx, p, offsets)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		delay := c.backoff.Delay(attempt, 0)
		c.logger.Warn("reading parked records again failed: retrying", "partition", p,
			"from", offsets[0], "to", offsets[len(offsets)-1], "err", err, "retry_in", delay.Round(time.Millisecond))
		sleep(ctx, delay)
	}
	for _, it := range batch {
		v, ok := values[it.offset]
		if !ok {
			it.skip = &skipped{cause: "expired", reason: "the record was deleted from Kafka while its tenant was being retried"}
			continue
		}
		it.value = v
		c.decodeItem(it)
	}
	c.metrics.reread.Add(float64(len(batch)))
	return nil
}
