package tsdbstore

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

var _ backend.BatchPusher = (*Store)(nil)

// PushBatch appends reqs, requests of one tenant, in one appender with one
// commit (backend.BatchPusher): a commit costs a WAL record and its write
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
		s.rejectAll(reqs, out, err, &backend.ClientError{Reason: err.Error(), Cause: err}, false)
		return nil
	}
	if err := ctx.Err(); err != nil {
		return requestError("push", err)
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
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
	t, err := s.acquireForWrite(ctx, tenant)
	if err != nil {
		if classify(err).client {
			s.rejectAll(reqs, out, err, requestError("push", err), true)
			return nil
		}
		return requestError("push", err)
	}
	// Appending to a TSDB whose files are gone would be acknowledged and
	// lost: check first, and let a Sync catch a loss that happens after.
	if err := s.usable(t); err != nil {
		s.release(t)
		s.startRecovery(t, err)
		return requestError("push", err)
	}
	defer s.release(t)
	return s.appendBatch(ctx, t, tenant, reqs, out)
}

// rejectAll answers the requests with answer, the client error for cause,
// which is none of the requests' own (such as an invalid tenant), as Push
// answers each: nil requests are not answered, and neither are those
// without samples when skipEmpty is set (cause came from opening the
// TSDB, which Push does not do for them).
func (s *Store) rejectAll(reqs []*prompb.WriteRequest, out []backend.Outcome, cause, answer error, skipEmpty bool) {
	code := classify(cause).code
	for i, req := range reqs {
		if req == nil {
			continue
		}
		n := backend.Count(req)
		if n == 0 && skipEmpty {
			continue
		}
		s.metrics.samplesRejected.WithLabelValues(code).Add(float64(n))
		out[i] = backend.Outcome{Result: backend.Result{Rejected: n}, Err: answer}
	}
}

// appendBatch appends reqs to t in as few appenders as PushBatch allows,
// and fills out once everything is committed.
func (s *Store) appendBatch(ctx context.Context, t *tenantDB, tenant string, reqs []*prompb.WriteRequest, out []backend.Outcome) error {
	bs := make([]*batch, len(reqs))
	var a *appender
	for i, req := range reqs {
		if req == nil || backend.Count(req) == 0 {
			continue
		}
		if a != nil && (s.cfg.OutOfOrderWindow > 0 || a.exemplars && hasExemplars(req)) {
			if err := a.commit(); err != nil {
				return err
			}
			a = nil
		}
		if a == nil {
			var err error
			if a, err = s.newAppender(ctx, t, tenant); err != nil {
				return err
			}
		}
		b, err := a.add(ctx, req)
		if err != nil {
			a.rollback()
			return err
		}
		bs[i] = b
	}
	if a != nil {
		if err := a.commit(); err != nil {
			return err
		}
	}
	// Committed: finish the bookkeeping even if the sender went away, so
	// that metrics and the answers agree with what is stored.
	ctx = context.WithoutCancel(ctx)
	for i, b := range bs {
		if b == nil {
			continue
		}
		b.findReplays(ctx)
		out[i].Result, out[i].Err = b.result()
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

// appender is one TSDB appender and its commit, shared by the requests
// appended in it: one for Push (appendRequest), several for PushBatch.
type appender struct {
	s   *Store
	t   *tenantDB
	app storage.AppenderV2
	ex  storage.ExemplarAppenderV2
	// tenant is the value of tenantLabel that every series gets in the
	// shared TSDB; empty in the separate tenancy.
	tenant string

	builder labels.ScratchBuilder
	// cache is the tenant's series cache while this appender holds it; nil
	// if another appender does.
	cache *seriesCache
	// last is, per series appended to, its newest sample in the appender.
	last map[storage.SeriesRef]lastAppended
	// requests counts the requests appended so far; the next one's index.
	requests int
	// maxT is the newest timestamp appended so far; valid once appended.
	maxT     int64
	appended bool
	// exemplars is set once a request appended exemplars: the exemplar
	// storage checks new exemplars against committed ones only.
	exemplars bool
}

// newAppender opens an appender on t's TSDB for the tenant's requests.
func (s *Store) newAppender(ctx context.Context, t *tenantDB, tenant string) (*appender, error) {
	app := t.db.AppenderV2(ctx)
	exApp, ok := app.(storage.ExemplarAppenderV2)
	if !ok {
		_ = app.Rollback()
		return nil, requestError("push", fmt.Errorf("appender %T cannot append exemplars", app))
	}
	a := &appender{s: s, t: t, app: app, ex: exApp, builder: labels.NewScratchBuilder(16)}
	if s.cfg.shared() {
		a.tenant = tenant
	}
	a.cache = t.caches.Load().acquire(t.db, a.tenant)
	return a, nil
}

// add appends req after the requests already in the appender. It returns
// the request's bookkeeping, which gives its result once the appender is
// committed, or a server error, after which the appender must be rolled
// back.
func (a *appender) add(ctx context.Context, req *prompb.WriteRequest) (*batch, error) {
	b := &batch{
		s:       a.s,
		t:       a.t,
		a:       a,
		app:     a.app,
		ex:      a.ex,
		index:   a.requests,
		bound:   math.MinInt64,
		builder: &a.builder,
		maxT:    math.MaxInt64,
		minT:    math.MinInt64,
		series:  len(req.Timeseries),
		codes:   map[string]int{},
	}
	a.requests++
	if a.appended {
		b.bound = a.maxT - a.s.cfg.BlockDuration.Milliseconds()/2
	}
	now := time.Now()
	if g := a.s.cfg.CreationGracePeriod; g > 0 {
		b.maxT = now.Add(g).UnixMilli()
	}
	if g := a.s.cfg.PastGracePeriod; g > 0 {
		b.minT = now.Add(-g).UnixMilli()
	}
	for i := range req.Timeseries {
		if i%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, requestError("push", err)
			}
		}
		if err := b.appendSeries(i, &req.Timeseries[i]); err != nil {
			return nil, requestError("push", err)
		}
	}
	return b, nil
}

// commit commits everything appended; on failure nothing is.
func (a *appender) commit() error {
	defer a.releaseCache()
	if err := a.app.Commit(); err != nil {
		return requestError("commit", err)
	}
	a.t.commits.Add(1)
	return nil
}

// rollback discards everything appended.
func (a *appender) rollback() {
	defer a.releaseCache()
	_ = a.app.Rollback()
}

// releaseCache lets the tenant's next appender use the series cache.
func (a *appender) releaseCache() {
	if a.cache != nil {
		a.cache.release()
		a.cache = nil
	}
}
