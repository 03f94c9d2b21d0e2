package pusher

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// ErrEarlierFailed answers a sequenced request that follows a failed request
// of its tenant on the same stream. Applying it would put the tenant's data
// out of order (the TSDB would then refuse the failed request's older
// samples for good), so it waits for the sender to resend the failed one.
var ErrEarlierFailed = &backend.ServerError{Reason: "pusher: not applied: an earlier request of this tenant on this stream failed; resend from it"}

// sequencer applies the sequenced requests of one stream: a queue per
// tenant, applied in the order received, while different tenants are
// applied concurrently. It is what lets a sender keep several requests of a
// tenant in flight without giving up their order. A tenant's goroutine
// takes what is queued, up to maxRequests requests and maxBytes bytes (the
// first whatever its size), and applies it in one call: a backend that
// batches (backend.BatchPusher) commits them together, so the requests a
// sender keeps in flight also save the backend work.
type sequencer struct {
	ctx    context.Context
	apply  applyFunc
	refuse refuseFunc
	// send sends the answers of rs, as[i] that of rs[i], and recycles
	// them: the answers of one apply call come in one call, so that a
	// stream can carry them in one message.
	send sendFunc
	// maxRequests and maxBytes bound what one apply call takes.
	maxRequests int
	maxBytes    int

	mu      sync.Mutex
	queues  map[string]*tenantQueue
	running sync.WaitGroup
	// idlers are the slots of the goroutines that finished applying a
	// tenant's queue and wait for another (park), guarded by mu; enqueue
	// hands a queue that became busy to the latest. When many tenants take
	// turns, most requests find their tenant's queue idle: a fresh
	// goroutine for each cost its start and the growth of its stack on the
	// way into the backend, about a tenth of the pusher's CPU at 1,000
	// tenants. A slot holds one queue, so a hand-off never waits for its
	// goroutine to reach its receive.
	idlers []chan *tenantQueue
	// parking, when set, runs in park between a goroutine's registering
	// its slot and waiting on it; tests use it to act in that gap.
	parking func()
	// started counts the goroutines started, for tests.
	started atomic.Int64
	// quit releases the parked goroutines once the stream ends (wait).
	quit     chan struct{}
	quitOnce sync.Once
}

// maxParked bounds the goroutines a stream keeps waiting for work; beyond
// it a goroutine whose queue is empty exits, as each one did before.
const maxParked = 64

// tenantQueue is one tenant's requests on a stream, not yet applied.
type tenantQueue struct {
	tenant  string
	queue   []received
	running bool // a goroutine is applying the queue
	// barrier is the sequence of the earliest request answered
	// SERVER_ERROR and not yet resent; 0 when none. It outlives the
	// goroutine (the failed request's successors may still be on the way)
	// and is only used by the one goroutine running at a time.
	barrier uint64
}

// applyFunc applies requests of one tenant, in order, and puts the answer
// of rs[i] in out[i] (Server.applyTenant). A request answered SERVER_ERROR
// may be followed by requests that were applied, or answered otherwise:
// the sequencer answers those as refused.
type applyFunc func(ctx context.Context, rs []received, out []answered)

// refuseFunc answers a request without applying it (Server.unapplied).
type refuseFunc func(*ferryv1.PushRequest, error) answered

// newSequencer returns a sequencer that applies requests with apply, at
// most maxRequests and maxBytes of a tenant at a time, answers those behind
// a failure with refuse, and gives every answer to send.
func newSequencer(ctx context.Context, apply applyFunc, refuse refuseFunc, send sendFunc, maxRequests, maxBytes int) *sequencer {
	return &sequencer{
		ctx: ctx, apply: apply, refuse: refuse, send: send,
		maxRequests: max(maxRequests, 1), maxBytes: maxBytes,
		queues: map[string]*tenantQueue{},
		quit:   make(chan struct{}),
	}
}

// enqueue queues r behind its tenant's earlier requests, handing the queue
// to a parked goroutine, or a new one, when it is idle.
func (sq *sequencer) enqueue(r received) {
	tenant := r.req.Tenant
	sq.mu.Lock()
	defer sq.mu.Unlock()
	q, ok := sq.queues[tenant]
	if !ok {
		q = &tenantQueue{tenant: tenant}
		sq.queues[tenant] = q
	}
	q.queue = append(q.queue, r)
	if !q.running {
		q.running = true
		if n := len(sq.idlers); n > 0 {
			slot := sq.idlers[n-1]
			sq.idlers[n-1] = nil
			sq.idlers = sq.idlers[:n-1]
			slot <- q // empty while registered: never blocks
			return
		}
		sq.started.Add(1)
		sq.running.Go(func() { sq.work(q) })
	}
}

// work applies q's requests, then those of every queue handed to it while
// parked.
func (sq *sequencer) work(q *tenantQueue) {
	slot := make(chan *tenantQueue, 1)
	for q != nil {
		sq.run(q)
		q = sq.park(slot)
	}
}

// park waits on slot for a queue to apply, unless maxParked goroutines
// already wait. It returns nil when the goroutine is to exit.
func (sq *sequencer) park(slot chan *tenantQueue) *tenantQueue {
	sq.mu.Lock()
	if len(sq.idlers) >= maxParked || sq.ctx.Err() != nil {
		sq.mu.Unlock()
		return nil
	}
	sq.idlers = append(sq.idlers, slot)
	sq.mu.Unlock()
	if sq.parking != nil {
		sq.parking()
	}
	select {
	case q := <-slot:
		return q
	case <-sq.quit:
	case <-sq.ctx.Done():
	}
	sq.mu.Lock()
	defer sq.mu.Unlock()
	if i := slices.Index(sq.idlers, slot); i >= 0 {
		sq.idlers = slices.Delete(sq.idlers, i, i+1)
		return nil
	}
	// A queue was handed over as the stream ended: it is this goroutine's
	// to run, as a goroutine started for it would have.
	return <-slot
}

// run applies q's requests until it is empty. An idle queue is forgotten
// unless it holds a barrier.
func (sq *sequencer) run(q *tenantQueue) {
	var rs []received
	var out []answered
	for {
		sq.mu.Lock()
		if len(q.queue) == 0 || sq.ctx.Err() != nil {
			// A stream that ended cannot carry answers: the sender resends
			// whatever it did not get an answer for.
			for _, r := range q.queue {
				r.recycle()
			}
			q.queue = nil
			q.running = false
			if q.barrier == 0 || sq.ctx.Err() != nil {
				delete(sq.queues, q.tenant)
			}
			sq.mu.Unlock()
			return
		}
		n := sq.take(q.queue)
		rs = append(rs[:0], q.queue[:n]...)
		clear(q.queue[:n])
		q.queue = q.queue[n:]
		sq.mu.Unlock()

		out = sq.applyAll(q, rs, out)
		clear(rs)
	}
}

// take returns how many requests at the head of queue to apply together.
func (sq *sequencer) take(queue []received) int {
	n, bytes := 1, queue[0].size
	for n < len(queue) && n < sq.maxRequests && bytes+queue[n].size <= sq.maxBytes {
		bytes += queue[n].size
		n++
	}
	return n
}

// applyAll answers rs, requests of q in the order received, exactly as if
// each were applied alone after the ones before it were answered: a
// request behind a request answered SERVER_ERROR is refused, the rest are
// applied, as many together as the barrier allows. The answers of one
// apply call, and of a run of refused requests, go to send together: none
// of them waits for another that is not ready. It returns out, the
// answers' buffer, for reuse.
func (sq *sequencer) applyAll(q *tenantQueue, rs []received, out []answered) []answered {
	for len(rs) > 0 {
		out = out[:0]
		for len(out) < len(rs) && sq.behind(q, rs[len(out)]) {
			out = append(out, sq.refused(q, rs[len(out)]))
		}
		if n := len(out); n > 0 {
			sq.send(rs[:n], out)
			clear(out)
			rs = rs[n:]
			continue
		}
		// The requests up to the next one the barrier refuses; resending
		// the failed request lifts the barrier.
		n := 0
		for ; n < len(rs) && !sq.behind(q, rs[n]); n++ {
			if rs[n].req.Sequence == q.barrier {
				q.barrier = 0
			}
		}
		group := rs[:n]
		rs = rs[n:]
		out = slices.Grow(out, n)[:n]
		sq.apply(sq.ctx, group, out)
		for i, r := range group {
			seq := r.req.Sequence
			switch {
			case sq.behind(q, r):
				// Behind a failure in the same call: answered as it would
				// have been applying one at a time. Had it been applied,
				// its resend is a replay.
				out[i] = sq.refused(q, r)
			case out[i].resp.Status == ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR && (q.barrier == 0 || seq < q.barrier):
				q.barrier = seq
			}
		}
		sq.send(group, out)
		clear(out)
	}
	return out
}

// behind reports whether r follows q's failed request.
func (sq *sequencer) behind(q *tenantQueue, r received) bool {
	return q.barrier != 0 && r.req.Sequence > q.barrier
}

// refused answers r, which follows q's failed request.
func (sq *sequencer) refused(q *tenantQueue, r received) answered {
	a := sq.refuse(r.req, fmt.Errorf("%w (sequence %d failed)", ErrEarlierFailed, q.barrier))
	a.resp.RetryAfterMs = 0 // the sender's backoff follows the failed request
	return a
}

// wait returns once every queue is empty and every goroutine ended. The
// caller enqueues nothing after it.
func (sq *sequencer) wait() {
	sq.quitOnce.Do(func() { close(sq.quit) })
	sq.running.Wait()
}
