package pusher

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/ferrylabs/ferry/internal/logging"
	"github.com/ferrylabs/ferry/internal/tenant"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/wire"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// An applier applies received requests to the backend and answers them:
// the checks that need no storage, the bound on requests applied at once,
// the backend's call, and the answer, counted and logged. Every stream and
// PushOne call of a server shares its one applier.
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
	if res, err := a.checkEnvelope(req, size, samples); err != nil {
		return res, err
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
// what validation removed from it.
func (a *applier) check(req *ferryv1.PushRequest, size int) (checked, backend.Result, error) {
	if res, err := a.checkEnvelope(req, size, backend.Count(&req.WriteRequest)); err != nil {
		return checked{}, res, err
	}
	rejected, invalid := a.cfg.Limits.Filter(&req.WriteRequest, a.now())
	return checked{rejected: rejected, invalid: invalid}, backend.Result{}, nil
}

// checkEnvelope refuses a request of total samples whose tenant or size
// is not allowed, whatever its write request holds.
func (a *applier) checkEnvelope(req *ferryv1.PushRequest, size int, total int64) (backend.Result, error) {
	if req.Tenant == "" {
		return backend.Result{Rejected: total}, backend.NewClientError("empty tenant: the Kafka record key must name the tenant")
	}
	if err := tenant.Validate(req.Tenant); err != nil {
		return backend.Result{Rejected: total}, backend.NewClientError("the Kafka record key must be a tenant ID: %v", err)
	}
	if size > a.cfg.MaxRequestBytes {
		return backend.Result{Rejected: total}, backend.NewClientError("request of %d bytes is larger than the limit of %d", size, a.cfg.MaxRequestBytes)
	}
	return backend.Result{}, nil
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
