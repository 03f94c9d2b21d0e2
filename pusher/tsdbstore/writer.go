package tsdbstore

import (
	"context"
	"log/slog"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// writer is the write path: it appends requests to a tenant's open TSDB,
// one batch (an appender and its commit) per request for Push and as few
// as the rules allow for PushBatch, and answers each request with its
// counts and first rejection. The Store hands it a tenant it holds open
// and checked; the writer owns no state beyond the batches it runs (the
// series caches it uses are the tenant's, see seriescache.go).
type writer struct {
	cfg     *Config
	metrics *metrics
	logger  *slog.Logger
}

// appendRequest appends every sample, histogram and exemplar of req in one
// batch and commits it. Samples the TSDB refuses are skipped and reported
// in a ClientError; any other failure rolls everything back and returns a
// server error.
func (w *writer) appendRequest(ctx context.Context, t *tenantDB, tenant string, req *prompb.WriteRequest) (backend.Result, error) {
	b, err := w.newBatch(ctx, t, tenant)
	if err != nil {
		return backend.Result{}, err
	}
	r, err := b.add(ctx, req)
	if err != nil {
		b.rollback()
		return backend.Result{}, err
	}
	if err := b.commit(); err != nil {
		return backend.Result{}, err
	}
	// The request is committed: finish the bookkeeping even if the sender
	// went away, so that metrics and the answer agree with what is stored.
	r.findReplays(context.WithoutCancel(ctx))
	return r.result()
}

// appendBatch appends reqs to t in as few batches as PushBatch allows,
// and fills out once everything is committed.
func (w *writer) appendBatch(ctx context.Context, t *tenantDB, tenant string, reqs []*prompb.WriteRequest, out []backend.Outcome) error {
	rs := make([]*request, len(reqs))
	var b *batch
	for i, req := range reqs {
		if req == nil || backend.Count(req) == 0 {
			continue
		}
		if b != nil && (w.cfg.OutOfOrderWindow > 0 || b.exemplars && hasExemplars(req)) {
			if err := b.commit(); err != nil {
				return err
			}
			b = nil
		}
		if b == nil {
			var err error
			if b, err = w.newBatch(ctx, t, tenant); err != nil {
				return err
			}
		}
		r, err := b.add(ctx, req)
		if err != nil {
			b.rollback()
			return err
		}
		rs[i] = r
	}
	if b != nil {
		if err := b.commit(); err != nil {
			return err
		}
	}
	// Committed: finish the bookkeeping even if the sender went away, so
	// that metrics and the answers agree with what is stored.
	ctx = context.WithoutCancel(ctx)
	for i, r := range rs {
		if r == nil {
			continue
		}
		r.findReplays(ctx)
		out[i].Result, out[i].Err = r.result()
	}
	return nil
}

// hasExemplars reports whether req carries exemplars.
func hasExemplars(req *prompb.WriteRequest) bool {
	for i := range req.Timeseries {
		if len(req.Timeseries[i].Exemplars) > 0 {
			return true
		}
	}
	return false
}

// rejectAll answers the requests with answer, the client error for cause,
// which is none of the requests' own (such as an invalid tenant), as Push
// answers each: nil requests are not answered, and neither are those
// without samples when skipEmpty is set (cause came from opening the
// TSDB, which Push does not do for them).
func (w *writer) rejectAll(reqs []*prompb.WriteRequest, out []backend.Outcome, cause, answer error, skipEmpty bool) {
	code := classify(cause).code
	for i, req := range reqs {
		if req == nil {
			continue
		}
		n := backend.Count(req)
		if n == 0 && skipEmpty {
			continue
		}
		w.metrics.samplesRejected.WithLabelValues(code).Add(float64(n))
		out[i] = backend.Outcome{Result: backend.Result{Rejected: n}, Err: answer}
	}
}
