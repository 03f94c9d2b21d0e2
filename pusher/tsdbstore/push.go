package tsdbstore

import (
	"context"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// The write entry points of the backend: they check the tenant and the
// store, hold the tenant's TSDB open and usable, and hand the requests to
// the writer (writer.go).

// Push appends req to the tenant's TSDB; see the package documentation for
// how errors are reported.
//
// Identical replays are accepted: a sample the TSDB refuses as out of order
// or too old is looked up, and counted as accepted when the same value is
// already stored at that timestamp. So a request retried after a server
// error, or re-read from Kafka after a crash, is acknowledged OK again.
func (s *Store) Push(ctx context.Context, tenant string, req *prompb.WriteRequest) (backend.Result, error) {
	if req == nil {
		return backend.Result{}, nil
	}
	if err := validateTenant(tenant); err != nil {
		n := backend.Count(req)
		s.metrics.samplesRejected.WithLabelValues(classify(err).code).Add(float64(n))
		return backend.Result{Rejected: n}, &backend.ClientError{
			Reason: err.Error(), Cause: err,
		}
	}
	if err := ctx.Err(); err != nil {
		return backend.Result{}, requestError("push", err)
	}
	if s.tenants.isClosed() {
		return backend.Result{}, requestError("push", backend.ErrShuttingDown)
	}
	s.meta.store(tenant, req.Metadata)
	if backend.Count(req) == 0 {
		// Nothing for the TSDB: do not open (or create) it for metadata alone.
		return backend.Result{}, nil
	}
	t, err := s.tenants.acquireForWrite(ctx, tenant)
	if err != nil {
		if c := classify(err); c.client {
			n := backend.Count(req)
			s.metrics.samplesRejected.WithLabelValues(c.code).Add(float64(n))
			return backend.Result{Rejected: n}, requestError("push", err)
		}
		return backend.Result{}, requestError("push", err)
	}
	// Appending to a TSDB whose files are gone would be acknowledged and
	// lost: check first, and let a Sync catch a loss that happens after.
	if err := s.durable.usable(t); err != nil {
		s.tenants.release(t)
		s.durable.startRecovery(t, err)
		return backend.Result{}, requestError("push", err)
	}
	defer s.tenants.release(t)
	return s.write.appendRequest(ctx, t, tenant, req)
}

var _ backend.BatchPusher = (*Store)(nil)

// PushBatch appends reqs, requests of one tenant, in one batch (one
// appender) with one commit (backend.BatchPusher): a commit costs a WAL record and its write
// whatever its size, which for small requests is most of their cost.
//
// Each request is answered as Push would have answered it after the ones
// before it were committed. The TSDB checks a sample against committed
// data only, so the checks that depend on the requests before it are made
// here (appendValue): a series' sample not newer than a pending one of an
// earlier request is refused as the TSDB would have refused it, and the
// head's lower bound moves with the pending samples as it would have with
// committed ones. Two cases are not followed that way; the requests before
// are committed first instead, and the rest go on in a new appender:
// exemplars after exemplars (the exemplar storage checks against its
// committed exemplars only) and any request when the TSDB has an
// out-of-order window (its commit sorts pending samples into the
// out-of-order head by rules that depend on the order of commits).
func (s *Store) PushBatch(ctx context.Context, tenant string, reqs []*prompb.WriteRequest, out []backend.Outcome) error {
	if len(reqs) == 1 {
		// Nothing to share: Push is the reference.
		res, err := s.Push(ctx, tenant, reqs[0])
		if err != nil && !backend.IsClientError(err) {
			return err
		}
		out[0] = backend.Outcome{Result: res, Err: err}
		return nil
	}
	for i := range out {
		out[i] = backend.Outcome{}
	}
	if err := validateTenant(tenant); err != nil {
		s.write.rejectAll(reqs, out, err, &backend.ClientError{Reason: err.Error(), Cause: err}, false)
		return nil
	}
	if err := ctx.Err(); err != nil {
		return requestError("push", err)
	}
	if s.tenants.isClosed() {
		return requestError("push", backend.ErrShuttingDown)
	}
	samples := false
	for _, req := range reqs {
		if req != nil {
			s.meta.store(tenant, req.Metadata)
			samples = samples || backend.Count(req) > 0
		}
	}
	if !samples {
		// Nothing for the TSDB: do not open (or create) it for metadata alone.
		return nil
	}
	t, err := s.tenants.acquireForWrite(ctx, tenant)
	if err != nil {
		if classify(err).client {
			s.write.rejectAll(reqs, out, err, requestError("push", err), true)
			return nil
		}
		return requestError("push", err)
	}
	// Appending to a TSDB whose files are gone would be acknowledged and
	// lost: check first, and let a Sync catch a loss that happens after.
	if err := s.durable.usable(t); err != nil {
		s.tenants.release(t)
		s.durable.startRecovery(t, err)
		return requestError("push", err)
	}
	defer s.tenants.release(t)
	return s.write.appendBatch(ctx, t, tenant, reqs, out)
}
