package consumer

import (
	"context"
	"fmt"
	"time"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/wire"
)

// delivery is the state of one lane's goroutine: the tenant's requests in
// flight, in the order sent, and the ones to send again.
type delivery struct {
	inflight []flight
	// failed are items answered SERVER_ERROR or lost with a stream, in
	// order; once there is one, nothing new is sent until every request in
	// flight is answered and the lane has backed off.
	failed []*item
	// resend are failed items to send again, before any new item.
	resend []*item
	// reread are parked items whose values were read again, next after
	// resend; they take window room again when sent.
	reread  []*item
	attempt int           // consecutive rounds of failures
	hint    time.Duration // the largest retry-after hint of this round
	cause   string        // of the round's first failure, for the log
	err     error
}

// flight is one item pushed and waiting for its answer.
type flight struct {
	it   *item
	call *call
}

// deliverLane is the goroutine of lane l: it pushes the lane's items in
// offset order, keeping up to -consumer.max-inflight-per-tenant in flight,
// until each is acknowledged OK or as a client error. Server errors and
// broken streams are retried with backoff for as long as ctx allows: the
// failed item and every item sent after it go again, in order, carrying
// the same sequence numbers, so the pusher (which refuses what follows a
// failure) applies the tenant's requests in order. An item that is not
// finished is never committed past.
func (c *Consumer) deliverLane(ctx context.Context, l *lane) {
	var d delivery
	for {
		if !c.fill(ctx, l, &d) {
			c.lanes.abandon(l)
			return
		}
		if len(d.inflight) == 0 {
			if len(d.resend) == 0 && len(d.reread) == 0 && c.lanes.retire(l) {
				return
			}
			continue
		}
		f := d.inflight[0]
		d.inflight = d.inflight[1:]
		resp, err := f.call.wait(ctx)
		if ctx.Err() != nil {
			c.lanes.abandon(l)
			return
		}
		c.settle(ctx, l, f.it, resp, err, &d)
		if len(d.inflight) == 0 && len(d.failed) > 0 {
			c.backOff(ctx, l, &d)
		}
	}
}

// fill sends items until the lane has its share in flight, it is out of
// items, or a failure waits for its round to end. It returns false when
// ctx is done.
func (c *Consumer) fill(ctx context.Context, l *lane, d *delivery) bool {
	for len(d.failed) == 0 && len(d.inflight) < c.cfg.MaxInflightPerTenant {
		it, err := c.next(ctx, l, d)
		if err != nil {
			return false
		}
		if it == nil {
			return true
		}
		select {
		case <-it.decoded:
		case <-ctx.Done():
			return false
		}
		if it.skip != nil {
			c.skip(ctx, it, it.skip.cause, it.skip.reason)
			continue
		}
		if it.sequence == 0 {
			it.sequence = c.nextSequence.Add(1)
		}
		req := &wire.PushRequest{
			RequestID: c.nextID.Add(1), Sequence: it.sequence,
			Tenant: it.tenant, Topic: c.cfg.Topic, Partition: it.partition, Offset: it.offset, Value: it.value,
		}
		if len(d.inflight) == 0 {
			d.inflight = append(d.inflight, flight{it: it, call: c.sender.start(ctx, req)})
			continue
		}
		call := c.sender.startOn(d.inflight[0].call.st, req)
		if call == nil {
			// The stream of the requests in flight is gone: their answers
			// (errors) come first, then this item goes again with them.
			d.resend = append([]*item{it}, d.resend...)
			return true
		}
		d.inflight = append(d.inflight, flight{it: it, call: call})
	}
	return ctx.Err() == nil
}

// next returns the item to send next: a failed one first, then one read
// again, else the lane's next; nil when there is none, or when a reread
// item has no window room yet and answers in flight will make some. It
// fails only when ctx is done.
func (c *Consumer) next(ctx context.Context, l *lane, d *delivery) (*item, error) {
	if len(d.resend) > 0 {
		it := d.resend[0]
		d.resend[0] = nil
		d.resend = d.resend[1:]
		return it, nil
	}
	if len(d.reread) == 0 {
		it := c.lanes.pop(l)
		if it == nil || !it.parked {
			return it, nil
		}
		batch := append([]*item{it}, c.lanes.popParked(l, it.partition, c.cfg.RetryingTenantRecords-1, c.cfg.MaxInflightBytes/4-it.size)...)
		if err := c.reread(ctx, batch); err != nil {
			return nil, err
		}
		d.reread = batch
	}
	it := d.reread[0]
	if !c.window.tryAcquire(it.size) {
		if len(d.inflight) > 0 {
			return nil, nil
		}
		if err := c.window.acquire(ctx, it.size); err != nil {
			return nil, err
		}
	}
	it.parked = false
	d.reread[0] = nil
	d.reread = d.reread[1:]
	return it, nil
}

// settle acts on one answer: OK finishes the item, a client error skips
// it, anything else marks it failed.
func (c *Consumer) settle(ctx context.Context, l *lane, it *item, resp *ferryv1.PushResponse, err error, d *delivery) {
	var cause string
	switch {
	case err != nil:
		cause = "stream_error"
	case resp.Status == ferryv1.AckStatus_ACK_STATUS_OK:
		c.countAck("ok")
		c.finish(it)
		if len(d.failed) == 0 && d.attempt > 0 {
			d.attempt = 0
			c.lanes.stopRetrying(l)
		}
		return
	case resp.Status == ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR:
		c.countAck("client_error")
		c.skip(ctx, it, "rejected", resp.Reason)
		return
	default: // SERVER_ERROR, and any status this version does not know
		cause = "server_error"
		err = fmt.Errorf("%s: %s", resp.Status, resp.Reason)
		d.hint = max(d.hint, time.Duration(resp.RetryAfterMs)*time.Millisecond)
	}
	c.countAck(cause)
	c.metrics.retries.WithLabelValues(cause).Inc()
	if len(d.failed) == 0 {
		d.cause, d.err = cause, err
	}
	d.failed = append(d.failed, it)
}

// backOff ends a round of failures: it waits, then queues the failed items
// to be sent again ahead of the lane's new ones.
func (c *Consumer) backOff(ctx context.Context, l *lane, d *delivery) {
	delay := c.backoff.Delay(d.attempt, d.hint)
	first := d.failed[0]
	if d.attempt == 0 || c.clientLogs.allow() {
		c.logger.Warn("push failed: retrying", "tenant", l.tenant, "partition", first.partition,
			"offset", first.offset, "requests", len(d.failed), "attempt", d.attempt+1,
			"retry_in", delay.Round(time.Millisecond), "cause", d.cause, "err", d.err)
	}
	// While the tenant fails, its records beyond its share give their
	// window room to the other tenants. Not for a broken stream: every
	// tenant waits for the next one alike, and parking would only make
	// them all read their records twice.
	if d.cause == "server_error" {
		for _, it := range c.lanes.startRetrying(l, c.cfg.RetryingTenantRecords) {
			c.window.release(it.size)
			c.metrics.parked.Inc()
		}
	}
	// Items not yet resent stay behind the ones that failed again: both
	// lists are in offset order and the failed ones came first.
	d.resend = append(d.failed, d.resend...)
	d.failed, d.hint, d.err = nil, 0, nil
	d.attempt++
	sleep(ctx, delay)
}
