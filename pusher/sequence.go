package pusher

import (
	"context"
	"fmt"
	"sync"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

// ErrEarlierFailed answers a sequenced request that follows a failed request
// of its tenant on the same stream. Applying it would put the tenant's data
// out of order (the TSDB would then refuse the failed request's older
// samples for good), so it waits for the sender to resend the failed one.
var ErrEarlierFailed = &ServerError{Reason: "pusher: not applied: an earlier request of this tenant on this stream failed; resend from it"}

// sequencer applies the sequenced requests of one stream: a queue per
// tenant, applied one at a time in the order received, while different
// tenants are applied concurrently. It is what lets a sender keep several
// requests of a tenant in flight without giving up their order.
type sequencer struct {
	ctx    context.Context
	handle handleFunc
	refuse refuseFunc
	send   func(received, *ferryv1.PushResponse)

	mu      sync.Mutex
	queues  map[string]*tenantQueue
	running sync.WaitGroup
}

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

// handleFunc applies one request and returns its answer (Server.handle).
type handleFunc func(context.Context, received) *ferryv1.PushResponse

// refuseFunc answers a request without applying it (Server.refuse).
type refuseFunc func(*ferryv1.PushRequest, error) *ferryv1.PushResponse

// newSequencer returns a sequencer that applies requests with handle,
// answers those behind a failure with refuse, and gives every answer to
// send.
func newSequencer(ctx context.Context, handle handleFunc, refuse refuseFunc, send func(received, *ferryv1.PushResponse)) *sequencer {
	return &sequencer{ctx: ctx, handle: handle, refuse: refuse, send: send, queues: map[string]*tenantQueue{}}
}

// enqueue queues r behind its tenant's earlier requests, starting the
// tenant's goroutine when it is idle.
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
		sq.running.Go(func() { sq.run(q) })
	}
}

// run applies q's requests until it is empty. An idle queue is forgotten
// unless it holds a barrier.
func (sq *sequencer) run(q *tenantQueue) {
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
		r := q.queue[0]
		q.queue[0] = received{}
		q.queue = q.queue[1:]
		sq.mu.Unlock()

		sq.send(r, sq.apply(q, r))
	}
}

// apply answers r: refused when it follows a failure, applied otherwise.
func (sq *sequencer) apply(q *tenantQueue, r received) *ferryv1.PushResponse {
	seq := r.req.Sequence
	if q.barrier != 0 && seq > q.barrier {
		resp := sq.refuse(r.req, fmt.Errorf("%w (sequence %d failed)", ErrEarlierFailed, q.barrier))
		resp.RetryAfterMs = 0 // the sender's backoff follows the failed request
		return resp
	}
	if seq == q.barrier {
		q.barrier = 0
	}
	resp := sq.handle(sq.ctx, r)
	if resp.Status == ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR && (q.barrier == 0 || seq < q.barrier) {
		q.barrier = seq
	}
	return resp
}

// wait returns once every queue is empty.
func (sq *sequencer) wait() { sq.running.Wait() }
