package pusher

import (
	"context"
	"time"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// batchRequests is how many sequenced requests of a tenant one call applies
// at most: -pusher.max-batch-requests for a backend that batches, 1 for
// one that applies requests one by one, so that a request behind a failed
// one is not even tried.
func (a *applier) batchRequests() int {
	if _, ok := a.backend.(backend.BatchPusher); ok {
		return a.cfg.MaxBatchRequests
	}
	return 1
}

// applyTenant answers rs, sequenced requests of one tenant in the order
// received, in out (applyFunc). A batching backend gets them in one
// PushBatch call, each checked first as apply checks it; otherwise the one
// request is applied as an unsequenced one is (handleRecovered). The call
// takes one of the in-flight slots: it is one apply for the backend.
func (a *applier) applyTenant(ctx context.Context, rs []received, out []answered) {
	a.metrics.batchRequests.Observe(float64(len(rs)))
	bp, ok := a.backend.(backend.BatchPusher)
	if len(rs) == 1 || !ok {
		for i, r := range rs {
			out[i] = a.handleRecovered(ctx, r)
		}
		return
	}
	for i, r := range rs {
		if r.bad != nil {
			out[i] = a.unapplied(r.req, r.bad)
		}
	}
	if !a.acquire() {
		for i, r := range rs {
			if r.bad == nil {
				out[i] = a.unapplied(r.req, a.refusal())
			}
		}
		return
	}
	defer a.release()
	defer func() {
		if p := recover(); p != nil {
			a.logPanic(ctx, p, rs[0].req)
			for i, r := range rs {
				if r.bad == nil {
					out[i] = answered{resp: a.answer(r.req, backend.Result{}, errInternal), err: errInternal} // logged above
				}
			}
		}
	}()
	a.pushBatch(ctx, bp, rs, out)
}

// pushBatch checks rs, decoded requests of one tenant except those answered
// already (bad), and applies those that pass in one PushBatch call.
func (a *applier) pushBatch(ctx context.Context, bp backend.BatchPusher, rs []received, out []answered) {
	start := time.Now()
	checks := make([]checked, len(rs))
	wrs := make([]*prompb.WriteRequest, 0, len(rs))
	idx := make([]int, 0, len(rs))
	for i, r := range rs {
		if r.bad != nil {
			continue
		}
		c, res, err := a.check(r.req, r.size)
		if err != nil {
			out[i] = answered{resp: a.answer(r.req, res, err), err: err, took: time.Since(start), applied: true}
			continue
		}
		checks[i] = c
		wrs = append(wrs, &r.req.WriteRequest)
		idx = append(idx, i)
	}
	if len(wrs) == 0 {
		return
	}
	outcomes := make([]backend.Outcome, len(wrs))
	// Every request of rs has the tenant: the sequencer queues by tenant.
	failed := bp.PushBatch(ctx, rs[idx[0]].req.Tenant, wrs, outcomes)
	took := time.Since(start)
	for k, i := range idx {
		res, err := outcomes[k].Result, outcomes[k].Err
		if failed != nil {
			res, err = backend.Result{}, failed
		}
		res, err = checks[i].merge(res, err)
		out[i] = answered{resp: a.answer(rs[i].req, res, err), err: err, took: took, applied: true}
	}
}
