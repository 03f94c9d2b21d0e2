package tsdbstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// The write batch: the writer runs one TSDB appender and its commit for
// one request (Push) or several of a tenant (PushBatch), holding the
// tenant's series cache meanwhile (acquire, release; the cache is
// seriescache.go), and answers each request once the batch is committed
// (result). A request's series and samples are appended in request.go.

// ctxCheckEvery is how many series are appended between checks of the
// request's context: often enough to stop a canceled huge request quickly,
// rarely enough to cost nothing.
const ctxCheckEvery = 64

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
	if len(r.cands) > 0 {
		r.findReplays(context.WithoutCancel(ctx))
	}
	return r.result()
}

// appendBatch appends reqs to t in as few batches as PushBatch allows,
// and fills out once everything is committed. counts are the requests'
// samples (backend.Count, 0 for a nil request): those without any are
// skipped, as Push skips them.
func (w *writer) appendBatch(ctx context.Context, t *tenantDB, tenant string, reqs []*prompb.WriteRequest, counts []int64, out []backend.Outcome) error {
	rs := make([]*request, len(reqs))
	var b *batch
	for i, req := range reqs {
		if counts[i] == 0 {
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
		if len(r.cands) > 0 {
			// Samples refused as out of order or too old: replays?
			r.findReplays(ctx)
		}
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

// batch is one TSDB appender and its commit, shared by the requests
// appended in it: one request for Push (writer.appendRequest), several for
// PushBatch (writer.appendBatch).
type batch struct {
	w   *writer
	t   *tenantDB
	app storage.AppenderV2
	ex  storage.ExemplarAppenderV2
	// tenant is the value of tenantLabel that every series gets in the
	// shared TSDB; empty in the separate tenancy.
	tenant string

	builder labels.ScratchBuilder
	// cache is the tenant's series cache while this batch holds it; nil
	// if another batch does.
	cache *seriesCache
	// last is, per series appended to, its newest sample in the batch.
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

// newBatch opens an appender on t's TSDB for the tenant's requests.
func (w *writer) newBatch(ctx context.Context, t *tenantDB, tenant string) (*batch, error) {
	app := t.db.AppenderV2(ctx)
	exApp, ok := app.(storage.ExemplarAppenderV2)
	if !ok {
		_ = app.Rollback()
		return nil, requestError("push", fmt.Errorf("appender %T cannot append exemplars", app))
	}
	b := &batch{w: w, t: t, app: app, ex: exApp, builder: labels.NewScratchBuilder(16)}
	if w.cfg.shared() {
		b.tenant = tenant
	}
	b.cache = t.caches.Load().acquire(t.db, b.tenant)
	return b, nil
}

// acquire returns the tenant's cache for an appender of db, or nil when
// another appender holds it or the caches belong to another TSDB of the
// tenant. The caller releases it with release. tenant is "" in the
// separate tenancy.
func (c *seriesCaches) acquire(db *tsdb.DB, tenant string) *seriesCache {
	if c == nil || c.db != db {
		return nil
	}
	c.mu.Lock()
	tc := c.byTenant[tenant]
	if tc == nil {
		tc = &seriesCache{owner: c}
		c.byTenant[tenant] = tc
	}
	c.mu.Unlock()
	if !tc.busy.CompareAndSwap(false, true) {
		return nil
	}
	if epoch := c.epoch(); epoch != tc.cleared || tc.index == nil {
		// New maps rather than clear: clear keeps the buckets, and a
		// tenant whose series were removed may have gone quiet.
		tc.index = map[string]int{}
		tc.series = nil
		tc.prev = -1
		tc.cleared = epoch
	}
	tc.gen++
	return tc
}

// add appends req after the requests already in the batch. It returns the
// request's bookkeeping, which gives its result once the batch is
// committed, or a server error, after which the batch must be rolled back.
func (b *batch) add(ctx context.Context, req *prompb.WriteRequest) (*request, error) {
	r := &request{
		w:       b.w,
		t:       b.t,
		batch:   b,
		app:     b.app,
		ex:      b.ex,
		index:   b.requests,
		bound:   math.MinInt64,
		builder: &b.builder,
		maxT:    math.MaxInt64,
		minT:    math.MinInt64,
		series:  len(req.Timeseries),
		codes:   map[string]int{},
	}
	b.requests++
	if b.appended {
		r.bound = b.maxT - b.w.cfg.BlockDuration.Milliseconds()/2
	}
	now := time.Now()
	if g := b.w.cfg.CreationGracePeriod; g > 0 {
		r.maxT = now.Add(g).UnixMilli()
	}
	if g := b.w.cfg.PastGracePeriod; g > 0 {
		r.minT = now.Add(-g).UnixMilli()
	}
	for i := range req.Timeseries {
		if i%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, requestError("push", err)
			}
		}
		if err := r.appendSeries(i, &req.Timeseries[i]); err != nil {
			return nil, requestError("push", err)
		}
	}
	return r, nil
}

// commit commits everything appended; on failure nothing is.
func (b *batch) commit() error {
	defer b.releaseCache()
	if err := b.app.Commit(); err != nil {
		return requestError("commit", err)
	}
	b.t.commits.Add(1)
	return nil
}

// rollback discards everything appended.
func (b *batch) rollback() {
	defer b.releaseCache()
	_ = b.app.Rollback()
}

// releaseCache lets the tenant's next batch use the series cache.
func (b *batch) releaseCache() {
	if b.cache != nil {
		b.cache.release()
		b.cache = nil
	}
}

// release lets the tenant's next appender use the cache.
func (c *seriesCache) release() {
	for _, i := range c.histograms {
		c.series[i].last = lastAppended{}
	}
	c.histograms = c.histograms[:0]
	c.busy.Store(false)
}

// result counts the outcome and builds the ClientError naming the first
// rejected sample, if any.
func (r *request) result() (backend.Result, error) {
	first := r.first
	for i := range r.cands {
		c := &r.cands[i]
		if c.replay {
			r.accepted++
			continue
		}
		r.rejected++
		r.codes[c.class.code]++
		if first == nil || c.seq < first.seq {
			first = &c.rejection
		}
	}
	m := r.w.metrics
	m.samplesAccepted.Add(float64(r.accepted))
	for code, n := range r.codes {
		m.samplesRejected.WithLabelValues(code).Add(float64(n))
	}
	res := backend.Result{Accepted: r.accepted, Rejected: r.rejected}
	if first == nil {
		return res, nil
	}
	series := first.series
	if r.batch.tenant != "" && !errors.Is(first.err, errReservedLabel) {
		// The sender named the series without it; a series refused for
		// carrying the label is named as it was sent.
		series = withoutTenant(series)
	}
	// The pusher appends the request's accepted and rejected counts.
	return res, &backend.ClientError{
		Reason: fmt.Sprintf("%s for series %s (first error: %v)",
			first.class.what, series, first.err),
		Cause: first.err,
	}
}
