package pusher

import (
	"context"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// What the server holds unanswered is bounded twice. A stream may hold at
// most -pusher.max-pending-per-stream requests: its reader takes a slot
// before reading the next request and the slot comes back once the
// request's answer is sent (or the stream ended). A client that sends and
// never reads its answers thus stops being read, and gRPC's flow control
// (a fixed stream window, see Listen) holds the rest of its data on the
// client's side. All streams and PushOne calls together hold at most
// -pusher.max-pending-bytes: a stream waits for room before decoding, a
// PushOne call without room is answered SERVER_ERROR.
//
// The byte bound is shared: clients that never read their answers can
// take it all and hold back the others. The per-stream and per-connection
// bounds make that take many streams; a stream's answers going unread is
// the client's fault, and ending such streams after a timeout is left for
// later.

// pendingOverhead is what a request costs beyond its encoded bytes while it
// is held: the goroutine that applies or answers it, its pooled decoder's
// bookkeeping. Counting it keeps a flood of tiny requests from holding
// millions of goroutines under a byte bound meant for payloads.
const pendingOverhead = 8 << 10

// pending is the server-wide account of requests held unanswered.
type pending struct {
	bytes    *semaphore.Weighted
	max      int64
	requests atomic.Int64 // held now, for tests and the gauge
	held     atomic.Int64 // bytes held now
	metrics  *metrics
}

func newPending(max int64, m *metrics) *pending {
	return &pending{bytes: semaphore.NewWeighted(max), max: max, metrics: m}
}

// cost is what a request of size encoded bytes counts against the bound. A
// request larger than the whole bound counts as the whole bound, so that
// it waits for the others instead of forever.
func (p *pending) cost(size int) int64 {
	return min(int64(size)+pendingOverhead, p.max)
}

// acquire waits for room for n bytes.
func (p *pending) acquire(ctx context.Context, n int64) error {
	if err := p.bytes.Acquire(ctx, n); err != nil {
		return err
	}
	p.add(n)
	return nil
}

// tryAcquire takes room for n bytes if there is some now.
func (p *pending) tryAcquire(n int64) bool {
	if !p.bytes.TryAcquire(n) {
		return false
	}
	p.add(n)
	return true
}

func (p *pending) add(n int64) {
	p.requests.Add(1)
	p.held.Add(n)
	p.metrics.pendingRequests.Inc()
	p.metrics.pendingBytes.Add(float64(n))
}

// release gives back what acquire took.
func (p *pending) release(n int64) {
	p.requests.Add(-1)
	p.held.Add(-n)
	p.metrics.pendingRequests.Dec()
	p.metrics.pendingBytes.Sub(float64(n))
	p.bytes.Release(n)
}

// streamHold is one stream's share: its slots and the server's account.
type streamHold struct {
	slots  chan struct{}
	server *pending
}

func newStreamHold(perStream int, server *pending) *streamHold {
	return &streamHold{slots: make(chan struct{}, perStream), server: server}
}

// take waits for a slot of the stream; false when ctx ended first.
func (h *streamHold) take(ctx context.Context) bool {
	select {
	case h.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// give returns a slot taken by take.
func (h *streamHold) give() { <-h.slots }

// done ends the hold of one request: its bytes and its slot.
func (h *streamHold) done(n int64) {
	h.server.release(n)
	h.give()
}

// tryTake takes a slot of the stream if one is free now.
func (h *streamHold) tryTake() bool {
	select {
	case h.slots <- struct{}{}:
		return true
	default:
		return false
	}
}
