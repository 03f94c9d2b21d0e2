package tsdbstore

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/ferrylabs/ferry/proto/prompb"
)

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
