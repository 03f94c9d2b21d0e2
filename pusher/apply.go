package pusher

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ferrylabs/ferry/internal/logging"
	"github.com/ferrylabs/ferry/internal/tenant"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/proto/wire"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// An applier applies received requests to the backend and answers them:
// the checks that need no storage, the bound on requests applied at once,
// the backend's call (one request, or a tenant's sequenced requests in one
// PushBatch), and the answer, classed, counted and logged. Every stream
// and PushOne call of a server shares its one applier.
type applier struct {
	cfg      Config
	backend  backend.Backend
	logger   *slog.Logger
	metrics  *metrics
	inflight chan struct{} // a slot per request being applied
	draining *atomic.Bool  // the server's: refuse new requests
	now      func() time.Time
	// errLog rate-limits the logs of requests answered SERVER_ERROR, per
	// tenant.
	errLog *logging.Limiter
}

func newApplier(cfg Config, b backend.Backend, logger *slog.Logger, m *metrics, draining *atomic.Bool) *applier {
	return &applier{
		cfg: cfg, backend: b, logger: logger, metrics: m, draining: draining,
		inflight: make(chan struct{}, cfg.MaxInflight),
		now:      time.Now,
		errLog:   logging.NewLimiter(serverErrorLogInterval),
	}
}

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

// handle answers one received request: a client error when its write
// request did not decode, a server error when the pusher is at its
// in-flight limit or draining, else the outcome of applying it.
func (a *applier) handle(ctx context.Context, r received) answered {
	if r.bad != nil {
		return a.unapplied(r.req, r.bad)
	}
	if !a.acquire() {
		return a.unapplied(r.req, a.refusal())
	}
	defer a.release()
	return a.applyOne(ctx, r.req, r.size, r.owner)
}

// handleRecovered is handle for the goroutines of a stream, which the gRPC
// recovery interceptor does not cover: a panic there would end the
// process. It becomes a SERVER_ERROR answer instead, without the panic
// value.
func (a *applier) handleRecovered(ctx context.Context, r received) (ans answered) {
	defer func() {
		if p := recover(); p != nil {
			a.logPanic(ctx, p, r.req)
			ans = answered{resp: a.answer(r.req, backend.Result{}, errInternal), err: errInternal} // logged above
		}
	}()
	return a.handle(ctx, r)
}

// errInternal answers a request whose processing panicked. A retry is the
// safe answer: skipping the request could lose data.
var errInternal = &backend.ServerError{Reason: "pusher: internal error"}

// logPanic logs a panic while applying req.
func (a *applier) logPanic(ctx context.Context, p any, req *ferryv1.PushRequest) {
	a.logger.ErrorContext(ctx, "panic applying a request", "panic", p, "tenant", logging.Untrusted(req.Tenant),
		"partition", req.Partition, "offset", req.Offset)
}

// acquire takes an in-flight slot, unless the server drains or none is
// free: a request beyond the bound is answered SERVER_ERROR at once
// rather than queued without bound.
func (a *applier) acquire() bool {
	if a.draining.Load() {
		return false
	}
	select {
	case a.inflight <- struct{}{}:
		a.metrics.inflight.Inc()
		return true
	default:
		return false
	}
}

func (a *applier) release() {
	<-a.inflight
	a.metrics.inflight.Dec()
}

// refusal is the answer to a request acquire refused.
func (a *applier) refusal() error {
	if a.draining.Load() {
		return backend.ErrShuttingDown
	}
	return backend.ErrOverloaded
}

// apply validates and applies one request and builds its answer, counted
// and logged. size is the encoded size of its write request: a stream
// knows it from the bytes it received, which saves walking every series
// again to compute it. p, when not nil, holds req as received: its
// encoding, and whether it was decoded (see pooledRequest).
func (a *applier) apply(ctx context.Context, req *ferryv1.PushRequest, size int, p *pooledRequest) *ferryv1.PushResponse {
	return a.settle(req, a.applyOne(ctx, req, size, p))
}

// applyOne is apply without counting and logging the answer.
func (a *applier) applyOne(ctx context.Context, req *ferryv1.PushRequest, size int, p *pooledRequest) answered {
	start := time.Now()
	res, err := a.process(ctx, req, size, p)
	return answered{resp: a.answer(req, res, err), err: err, took: time.Since(start), applied: true}
}

// process validates and applies one request, whose encoding p holds when
// it is not nil.
func (a *applier) process(ctx context.Context, req *ferryv1.PushRequest, size int, p *pooledRequest) (backend.Result, error) {
	if p != nil && p.scanned {
		return a.processScanned(ctx, req, size, p)
	}
	c, res, err := a.check(req, size)
	if err != nil {
		return res, err
	}
	// The received bytes are the request only when validation removed
	// nothing: a bad series without samples rejects none, yet the bytes
	// still hold it.
	if rp, ok := a.backend.(backend.RawPusher); ok && p != nil && c.invalid == nil {
		res, err = rp.PushRaw(ctx, req.Tenant, p.buf, backend.Count(&req.WriteRequest))
	} else {
		res, err = a.backend.Push(ctx, req.Tenant, &req.WriteRequest)
	}
	return c.merge(res, err)
}

// processScanned applies a request that wire.Decoder.Scan vouched for
// (envelope.decode) as it was received, without decoding it. Scan checked
// everything Filter checks but the time bounds, which move with the
// clock: a request with a sample outside them now is decoded and applied
// as any other, so that it gets Filter's answer.
func (a *applier) processScanned(ctx context.Context, req *ferryv1.PushRequest, size int, p *pooledRequest) (backend.Result, error) {
	samples := int64(p.sum.Samples)
	if !a.withinTimeBounds(p.sum) {
		if err := p.decodeWriteRequest(); err != nil {
			// Scan vouches that Decode accepts the bytes: this is a bug,
			// and a client error would skip data. Retrying is safe.
			return backend.Result{}, &backend.ServerError{Reason: "pusher: a scanned request did not decode: " + err.Error()}
		}
		return a.process(ctx, req, size, p)
	}
	if err := a.checkEnvelope(req, size); err != nil {
		return backend.Result{Rejected: samples}, err
	}
	return a.backend.(backend.RawPusher).PushRaw(ctx, req.Tenant, p.buf, samples)
}

// withinTimeBounds reports whether the samples Scan summed up in sum are
// all within the limits' time bounds now.
func (a *applier) withinTimeBounds(sum wire.Summary) bool {
	if sum.Samples == 0 {
		return true
	}
	minTs, maxTs := a.cfg.Limits.TimeBounds(a.now())
	return sum.MinTime >= minTs && sum.MaxTime <= maxTs
}

// checked is what validation found in a request it lets through to the
// backend: the samples it removed, and the client error naming the first.
type checked struct {
	rejected int64
	invalid  *backend.ClientError // nil when nothing was invalid
}

// check validates req, whose write request is size bytes encoded. A request
// it refuses whole is returned with its counts and client error; otherwise
// what validation removed from it. Its samples are counted only for a
// request refused whole: the backend counts those it appends.
func (a *applier) check(req *ferryv1.PushRequest, size int) (checked, backend.Result, error) {
	if err := a.checkEnvelope(req, size); err != nil {
		return checked{}, backend.Result{Rejected: backend.Count(&req.WriteRequest)}, err
	}
	// The storage-free checks, the same function the gateway calls: its
	// first violation answers the request as a ClientError.
	rejected, v := a.cfg.Limits.Filter(&req.WriteRequest, a.now())
	c := checked{rejected: rejected}
	if v != nil {
		c.invalid = &backend.ClientError{Reason: v.Reason, Cause: v}
	}
	return c, backend.Result{}, nil
}

// checkEnvelope refuses a request whose tenant or size is not allowed,
// whatever its write request holds.
func (a *applier) checkEnvelope(req *ferryv1.PushRequest, size int) error {
	if req.Tenant == "" {
		return backend.NewClientError("empty tenant: the Kafka record key must name the tenant")
	}
	if err := tenant.Validate(req.Tenant); err != nil {
		return backend.NewClientError("the Kafka record key must be a tenant ID: %v", err)
	}
	if size > a.cfg.MaxRequestBytes {
		return backend.NewClientError("request of %d bytes is larger than the limit of %d", size, a.cfg.MaxRequestBytes)
	}
	return nil
}

// merge completes the backend's outcome of a checked request with what
// validation removed from it.
func (c checked) merge(res backend.Result, err error) (backend.Result, error) {
	res.Rejected += c.rejected
	if err != nil {
		if !backend.IsClientError(err) {
			// A server error applies to the whole request: it is retried.
			return backend.Result{}, err
		}
		return res, err
	}
	if c.invalid != nil {
		return res, c.invalid
	}
	return res, nil
}

// answered is a request's answer before it is counted and logged (settle).
type answered struct {
	resp *ferryv1.PushResponse
	err  error // what resp says, for the log
	// took is the time applying it took; applied is set when it was
	// applied (or tried), not refused unseen.
	took    time.Duration
	applied bool
}

// answer turns a request's outcome into its acknowledgement.
func (a *applier) answer(req *ferryv1.PushRequest, res backend.Result, err error) *ferryv1.PushResponse {
	class, retryAfter := backend.Classify(err)
	resp := &ferryv1.PushResponse{
		RequestId:       req.RequestId,
		Status:          ackStatus(class),
		AcceptedSamples: res.Accepted,
		RejectedSamples: res.Rejected,
		RetryAfterMs:    retryAfter.Milliseconds(),
	}
	if err != nil {
		resp.Reason = err.Error()
		if class == backend.ClassClient {
			resp.Reason = fmt.Sprintf("%s (%d accepted, %d rejected)", resp.Reason, res.Accepted, res.Rejected)
		}
	}
	return resp
}

// ackStatus is the acknowledgement of the wire API that answers a request
// of class c: the one place where the backend's classes meet gRPC's
// messages.
func ackStatus(c backend.Class) ferryv1.AckStatus {
	switch c {
	case backend.ClassOK:
		return ferryv1.AckStatus_ACK_STATUS_OK
	case backend.ClassClient:
		return ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR
	default:
		// Anything else is retried: skipping could lose data.
		return ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR
	}
}

// unapplied is the answer to a request refused with err without applying
// it.
func (a *applier) unapplied(req *ferryv1.PushRequest, err error) answered {
	return answered{resp: a.answer(req, backend.Result{}, err), err: err}
}

// settle counts ans, the answer to req, logs it when it was applied and
// not OK, and returns it.
func (a *applier) settle(req *ferryv1.PushRequest, ans answered) *ferryv1.PushResponse {
	resp := ans.resp
	a.metrics.observe(resp, ans.took)
	if !ans.applied {
		return resp
	}
	if resp.Status == ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR {
		a.logServerError(req, ans.err)
	} else if resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
		a.logger.Debug("request not applied", "tenant", logging.Untrusted(req.Tenant), "partition", req.Partition,
			"offset", req.Offset, "status", resp.Status.String(), "reason", logging.Untrusted(resp.Reason))
	}
	return resp
}

// serverErrorLogInterval is how often the server errors of one tenant are
// logged at most: a failing disk fails every request, and the consumer
// retries each.
const serverErrorLogInterval = 10 * time.Second

// logServerError logs a request the backend answered SERVER_ERROR: at the
// default level, since it is the pusher's or its storage's failure and
// holds back the tenant's commits, but at most once per tenant per
// serverErrorLogInterval, with the count of those held back.
func (a *applier) logServerError(req *ferryv1.PushRequest, err error) {
	tenant := logging.Untrusted(req.Tenant)
	ok, suppressed := a.errLog.Allow(tenant)
	if !ok {
		return
	}
	a.logger.Error("request answered SERVER_ERROR: it is retried, and nothing past it is committed until it succeeds",
		"tenant", tenant, "partition", req.Partition, "offset", req.Offset,
		"cause", logging.Untrusted(fmt.Sprint(err)), "suppressed", suppressed)
}
