package tsdbstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// ctxCheckEvery is how many series are appended between checks of the
// request's context: often enough to stop a canceled huge request quickly,
// rarely enough to cost nothing.
const ctxCheckEvery = 64

// point is one sample of any kind: a float (h and fh nil), an integer
// histogram or a float histogram.
type point struct {
	t  int64
	v  float64
	h  *histogram.Histogram
	fh *histogram.FloatHistogram
}

// identical reports whether two samples at the same timestamp are the same
// value, the condition under which the TSDB treats a second append as a
// no-op. Floats compare bitwise so that NaNs, stale markers included, equal
// themselves.
func (a point) identical(b point) bool {
	switch {
	case a.h != nil:
		return b.h != nil && a.h.Equals(b.h)
	case a.fh != nil:
		return b.fh != nil && a.fh.Equals(b.fh)
	default:
		return b.h == nil && b.fh == nil && math.Float64bits(a.v) == math.Float64bits(b.v)
	}
}

// rejection is one rejected sample or exemplar.
type rejection struct {
	seq    int // position in the request, to report the first rejection
	series labels.Labels
	err    error
	class  errClass
}

// candidate is a sample or exemplar the TSDB refused as out of order or too
// old. It may be a replay of data already stored, which the request accepts.
type candidate struct {
	rejection
	tsIndex    int // the prompb.TimeSeries it came from
	val        point
	ex         exemplar.Exemplar
	isExemplar bool
	replay     bool // set once found stored with the same value
}

// lastAppended is the newest sample appended to a series by this request,
// against which the request's later samples of that series are checked: the
// TSDB checks them against committed data only, and would silently drop a
// sample the request itself made out of order or duplicate at Commit.
type lastAppended struct {
	val point
	ok  bool
}

// batch appends one request to one tenant's TSDB in one appender.
type batch struct {
	s   *Store
	t   *tenantDB
	app storage.AppenderV2
	ex  storage.ExemplarAppenderV2

	builder  labels.ScratchBuilder
	scratch  labels.Labels // reused for series lookups only, never retained
	maxT     int64         // newest acceptable timestamp; math.MaxInt64 without a grace period
	accepted int64
	rejected int64
	seq      int
	first    *rejection // first rejection that is not a candidate
	cands    []candidate
	last     map[storage.SeriesRef]lastAppended // series seen in earlier TimeSeries of the request
	codes    map[string]int                     // rejections by metric reason
}

// appendRequest appends every sample, histogram and exemplar of req in one
// appender and commits it. Samples the TSDB refuses are skipped and reported
// in a ClientError; any other failure rolls everything back and returns a
// server error.
func (s *Store) appendRequest(ctx context.Context, t *tenantDB, req *prompb.WriteRequest) (backend.Result, error) {
	app := t.db.AppenderV2(ctx)
	exApp, ok := app.(storage.ExemplarAppenderV2)
	if !ok {
		_ = app.Rollback()
		return backend.Result{}, requestError("push", fmt.Errorf("appender %T cannot append exemplars", app))
	}
	b := &batch{
		s:       s,
		t:       t,
		app:     app,
		ex:      exApp,
		builder: labels.NewScratchBuilder(16),
		maxT:    math.MaxInt64,
		codes:   map[string]int{},
	}
	if g := s.cfg.CreationGracePeriod; g > 0 {
		b.maxT = time.Now().Add(g).UnixMilli()
	}
	for i := range req.Timeseries {
		if i%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				_ = app.Rollback()
				return backend.Result{}, requestError("push", err)
			}
		}
		if err := b.appendSeries(i, &req.Timeseries[i]); err != nil {
			_ = app.Rollback()
			return backend.Result{}, requestError("push", err)
		}
	}
	if err := app.Commit(); err != nil {
		return backend.Result{}, requestError("commit", err)
	}
	t.commits.Add(1)
	// The request is committed: finish the bookkeeping even if the sender
	// went away, so that metrics and the answer agree with what is stored.
	b.findReplays(context.WithoutCancel(ctx))
	return b.result()
}

// appendSeries appends one TimeSeries. It returns an error only for a
// failure that must abort the request; rejected samples are recorded.
//
// The request's strings are only borrowed (see backend.Backend): everything
// kept past Push goes through ScratchBuilder.Labels, which with Prometheus'
// default stringlabels implementation copies names and values into one new
// string. Built with -tags slicelabels it would not, and the head would keep
// strings of reused buffers; TestStoreKeepsNothingOfAStreamRequest fails then.
func (b *batch) appendSeries(tsIndex int, ts *prompb.TimeSeries) error {
	b.builder.Reset()
	for _, l := range ts.Labels {
		b.builder.Add(l.Name, l.Value)
	}
	b.builder.Sort()
	// Look the series up with reused memory and keep the head's own copy of
	// its labels: in steady state no series is new, and this saves an
	// allocation per series. Only a new series needs labels of its own,
	// since the head keeps them.
	b.builder.Overwrite(&b.scratch)
	ref, ls := b.getRef(b.scratch)
	if ref == 0 {
		ls = b.builder.Labels()
	}
	if ref == 0 && b.s.cfg.MaxSeriesPerTenant > 0 {
		// Hold the tenant's series lock while this TimeSeries may create
		// its series, so the limit check and the creation are atomic.
		b.t.seriesMu.Lock()
		defer b.t.seriesMu.Unlock()
		if ref, _ = b.getRef(ls); ref == 0 {
			if n := b.t.db.Head().NumSeries(); n >= uint64(b.s.cfg.MaxSeriesPerTenant) {
				err := fmt.Errorf("%w: the tenant has %d series, the limit is %d (-limits.max-series-per-tenant)",
					errSeriesLimit, n, b.s.cfg.MaxSeriesPerTenant)
				for range len(ts.Samples) + len(ts.Histograms) + len(ts.Exemplars) {
					b.reject(ls, err)
				}
				return nil
			}
		}
	}

	var last lastAppended
	if ref != 0 {
		last = b.last[ref]
	}
	var err error
	if ref, last, err = b.appendFloats(tsIndex, ls, ref, last, ts.Samples); err != nil {
		return err
	}
	if ref, last, err = b.appendHistograms(tsIndex, ls, ref, last, ts.Histograms); err != nil {
		return err
	}
	if ref != 0 && last.ok {
		if b.last == nil {
			b.last = map[storage.SeriesRef]lastAppended{}
		}
		b.last[ref] = last
	}
	return b.appendExemplars(tsIndex, ls, ref, ts.Exemplars)
}

// getRef returns the head's reference and labels of the series; 0 and
// empty labels if the head has no such series.
func (b *batch) getRef(ls labels.Labels) (storage.SeriesRef, labels.Labels) {
	if g, ok := b.app.(storage.GetRef); ok {
		return g.GetRef(ls, ls.Hash())
	}
	return 0, labels.EmptyLabels()
}

func (b *batch) appendFloats(tsIndex int, ls labels.Labels, ref storage.SeriesRef, last lastAppended, samples []prompb.Sample) (storage.SeriesRef, lastAppended, error) {
	if !slices.IsSortedFunc(samples, func(a, b prompb.Sample) int { return cmp.Compare(a.Timestamp, b.Timestamp) }) {
		// Senders send samples in order; sorting the rare exception lets
		// the TSDB accept all of them instead of the newest only.
		samples = slices.Clone(samples)
		slices.SortStableFunc(samples, func(a, b prompb.Sample) int { return cmp.Compare(a.Timestamp, b.Timestamp) })
	}
	for _, smp := range samples {
		var err error
		ref, last, err = b.appendValue(tsIndex, ls, ref, last, point{t: smp.Timestamp, v: smp.Value})
		if err != nil {
			return ref, last, err
		}
	}
	return ref, last, nil
}

func (b *batch) appendHistograms(tsIndex int, ls labels.Labels, ref storage.SeriesRef, last lastAppended, hs []prompb.Histogram) (storage.SeriesRef, lastAppended, error) {
	order := func(a, b prompb.Histogram) int { return cmp.Compare(a.Timestamp, b.Timestamp) }
	if !slices.IsSortedFunc(hs, order) {
		hs = slices.Clone(hs)
		slices.SortStableFunc(hs, order)
	}
	for i := range hs {
		h, fh, err := convertHistogram(&hs[i])
		if err != nil {
			b.reject(ls, err)
			continue
		}
		ref, last, err = b.appendValue(tsIndex, ls, ref, last, point{t: hs[i].Timestamp, h: h, fh: fh})
		if err != nil {
			return ref, last, err
		}
	}
	return ref, last, nil
}

// appendValue appends one sample of any kind, or records why not.
func (b *batch) appendValue(tsIndex int, ls labels.Labels, ref storage.SeriesRef, last lastAppended, v point) (storage.SeriesRef, lastAppended, error) {
	if v.t > b.maxT {
		b.reject(ls, fmt.Errorf("%w: timestamp %d is more than %v ahead of now (-limits.creation-grace-period)",
			errTooFarInFuture, v.t, b.s.cfg.CreationGracePeriod))
		return ref, last, nil
	}
	if last.ok {
		switch {
		case v.t == last.val.t && v.identical(last.val):
			// The same sample twice in one request: the TSDB would drop
			// the second at Commit; it is accepted as a no-op.
			b.accepted++
			return ref, last, nil
		case v.t == last.val.t:
			b.reject(ls, duplicateErr(v, last.val))
			return ref, last, nil
		case v.t < last.val.t && b.s.cfg.OutOfOrderWindow == 0:
			// Only possible when a series' floats and histograms, or two
			// TimeSeries of one series, interleave in time. With an
			// out-of-order window the TSDB sorts this out at Commit.
			b.reject(ls, fmt.Errorf("%w: timestamp %d is older than %d earlier in the same request",
				storage.ErrOutOfOrderSample, v.t, last.val.t))
			return ref, last, nil
		}
	}
	newRef, err := b.app.Append(ref, ls, 0, v.t, v.v, v.h, v.fh, storage.AOptions{})
	if err != nil {
		c := classify(err)
		if !c.client {
			return ref, last, fmt.Errorf("append to series %s: %w", ls, err)
		}
		if replayable(err) {
			b.candidate(tsIndex, ls, err, c, candidate{val: v})
		} else {
			b.rejectClassified(ls, err, c)
		}
		return ref, last, nil
	}
	b.accepted++
	if !last.ok || v.t > last.val.t {
		last = lastAppended{val: v, ok: true}
	}
	return newRef, last, nil
}

// duplicateErr describes a second sample at a timestamp with another value.
func duplicateErr(v, prev point) error {
	if v.h == nil && v.fh == nil && prev.h == nil && prev.fh == nil {
		return storage.NewDuplicateFloatErr(v.t, prev.v, v.v)
	}
	return fmt.Errorf("%w: timestamp %d appears twice in the request with different values",
		storage.ErrDuplicateSampleForTimestamp, v.t)
}

// replayable reports whether err may have refused data already stored: the
// TSDB says "out of order" or "too old" without looking at the stored value,
// and only the newest sample of a series is exempt when identical.
func replayable(err error) bool {
	return errors.Is(err, storage.ErrOutOfOrderSample) ||
		errors.Is(err, storage.ErrOutOfBounds) ||
		errors.Is(err, storage.ErrTooOldSample) ||
		errors.Is(err, storage.ErrOutOfOrderExemplar)
}

func (b *batch) appendExemplars(tsIndex int, ls labels.Labels, ref storage.SeriesRef, eps []prompb.Exemplar) error {
	if len(eps) == 0 {
		return nil
	}
	if b.s.cfg.MaxExemplars == 0 {
		// Storage is off by configuration, not because of the data.
		b.accepted += int64(len(eps))
		b.s.metrics.exemplarsDropped.Add(float64(len(eps)))
		return nil
	}
	exs := make([]exemplar.Exemplar, 0, len(eps))
	for _, ep := range eps {
		if ep.Timestamp > b.maxT {
			b.reject(ls, fmt.Errorf("exemplar: %w: timestamp %d is more than %v ahead of now (-limits.creation-grace-period)",
				errTooFarInFuture, ep.Timestamp, b.s.cfg.CreationGracePeriod))
			continue
		}
		b.builder.Reset()
		for _, l := range ep.Labels {
			b.builder.Add(l.Name, l.Value)
		}
		b.builder.Sort()
		exs = append(exs, exemplar.Exemplar{Labels: b.builder.Labels(), Value: ep.Value, Ts: ep.Timestamp, HasTs: true})
	}
	if len(exs) == 0 {
		return nil
	}
	// AppendExemplars requires them in timestamp order.
	slices.SortStableFunc(exs, exemplar.Compare)
	_, err := b.ex.AppendExemplars(ref, ls, exs)
	if err == nil {
		b.accepted += int64(len(exs))
		return nil
	}
	var partial *storage.AppendPartialError
	if !errors.As(err, &partial) {
		c := classify(err)
		if !c.client {
			return fmt.Errorf("append exemplars to series %s: %w", ls, err)
		}
		for range exs {
			b.rejectClassified(ls, err, c)
		}
		return nil
	}
	failed := make([]error, len(exs))
	for _, ee := range partial.ExemplarErrors {
		if ee.Index >= 0 && ee.Index < len(exs) && failed[ee.Index] == nil {
			failed[ee.Index] = ee.Err
		}
	}
	for i, ferr := range failed {
		if ferr == nil {
			b.accepted++
			continue
		}
		c := classify(ferr)
		if !c.client {
			return fmt.Errorf("append exemplar to series %s: %w", ls, ferr)
		}
		if replayable(ferr) {
			b.candidate(tsIndex, ls, ferr, c, candidate{ex: exs[i], isExemplar: true})
		} else {
			b.rejectClassified(ls, ferr, c)
		}
	}
	return nil
}

func (b *batch) reject(ls labels.Labels, err error) {
	b.rejectClassified(ls, err, classify(err))
}

func (b *batch) rejectClassified(ls labels.Labels, err error, c errClass) {
	b.seq++
	b.rejected++
	b.codes[c.code]++
	if b.first == nil {
		b.first = &rejection{seq: b.seq, series: ls, err: err, class: c}
	}
}

func (b *batch) candidate(tsIndex int, ls labels.Labels, err error, c errClass, cand candidate) {
	b.seq++
	cand.rejection = rejection{seq: b.seq, series: ls, err: err, class: c}
	cand.tsIndex = tsIndex
	b.cands = append(b.cands, cand)
}

// result counts the outcome and builds the ClientError naming the first
// rejected sample, if any.
func (b *batch) result() (backend.Result, error) {
	first := b.first
	for i := range b.cands {
		c := &b.cands[i]
		if c.replay {
			b.accepted++
			continue
		}
		b.rejected++
		b.codes[c.class.code]++
		if first == nil || c.seq < first.seq {
			first = &c.rejection
		}
	}
	m := b.s.metrics
	m.samplesAccepted.Add(float64(b.accepted))
	for code, n := range b.codes {
		m.samplesRejected.WithLabelValues(code).Add(float64(n))
	}
	res := backend.Result{Accepted: b.accepted, Rejected: b.rejected}
	if first == nil {
		return res, nil
	}
	// The pusher appends the request's accepted and rejected counts.
	return res, &backend.ClientError{
		Reason: fmt.Sprintf("%s for series %s (first error: %v)",
			first.class.what, first.series, first.err),
		Cause: first.err,
	}
}

// findReplays looks up the stored data for every candidate and marks those
// already stored with the same value as replays. Failing to look is not an
// error: the candidates then stay rejected, as the TSDB said.
func (b *batch) findReplays(ctx context.Context) {
	if len(b.cands) == 0 {
		return
	}
	// One querier for all series, over the candidates' time range only, so
	// that blocks outside it are not opened.
	mint, maxt := int64(math.MaxInt64), int64(math.MinInt64)
	for _, c := range b.cands {
		if !c.isExemplar {
			mint, maxt = min(mint, c.val.t), max(maxt, c.val.t)
		}
	}
	var q storage.Querier
	var eq storage.ExemplarQuerier
	defer func() {
		if q != nil {
			_ = q.Close()
		}
	}()
	// Candidates of one TimeSeries are contiguous: they were recorded while
	// appending it.
	for start := 0; start < len(b.cands); {
		end := start + 1
		for end < len(b.cands) && b.cands[end].tsIndex == b.cands[start].tsIndex {
			end++
		}
		group := b.cands[start:end]
		start = end

		var samples, exemplars []*candidate
		for i := range group {
			if group[i].isExemplar {
				exemplars = append(exemplars, &group[i])
			} else {
				samples = append(samples, &group[i])
			}
		}
		matchers := equalMatchers(group[0].series)
		if len(samples) > 0 {
			if q == nil {
				var err error
				if q, err = b.t.db.Querier(mint, maxt); err != nil {
					b.s.logger.Debug("cannot look up replayed samples", "tenant", b.t.id, "err", err)
					return
				}
			}
			markStoredSamples(ctx, q, group[0].series, matchers, samples)
		}
		if len(exemplars) > 0 {
			if eq == nil {
				var err error
				if eq, err = b.t.db.ExemplarQuerier(ctx); err != nil {
					b.s.logger.Debug("cannot look up replayed exemplars", "tenant", b.t.id, "err", err)
					return
				}
			}
			markStoredExemplars(eq, group[0].series, matchers, exemplars)
		}
	}
	replays := 0
	for i := range b.cands {
		if b.cands[i].replay {
			replays++
		}
	}
	b.s.metrics.replaysAccepted.Add(float64(replays))
}

// equalMatchers selects exactly the series ls (and, in theory, series with
// more labels, which the callers filter out).
func equalMatchers(ls labels.Labels) []*labels.Matcher {
	ms := make([]*labels.Matcher, 0, ls.Len())
	ls.Range(func(l labels.Label) {
		ms = append(ms, &labels.Matcher{Type: labels.MatchEqual, Name: l.Name, Value: l.Value})
	})
	return ms
}

// markStoredSamples marks the candidates whose timestamp holds the same value
// in storage.
func markStoredSamples(ctx context.Context, q storage.Querier, ls labels.Labels, matchers []*labels.Matcher, cands []*candidate) {
	slices.SortStableFunc(cands, func(a, b *candidate) int { return cmp.Compare(a.val.t, b.val.t) })
	hints := &storage.SelectHints{Start: cands[0].val.t, End: cands[len(cands)-1].val.t}
	ss := q.Select(ctx, false, hints, matchers...)
	for ss.Next() {
		series := ss.At()
		if !labels.Equal(series.Labels(), ls) {
			continue
		}
		it := series.Iterator(nil)
		for _, c := range cands {
			vt := it.Seek(c.val.t)
			if vt == chunkenc.ValNone {
				break
			}
			if it.AtT() != c.val.t {
				continue
			}
			c.replay = storedEquals(it, vt, c.val)
		}
		return
	}
}

// storedEquals compares the iterator's current sample with v. Histograms are
// compared by their non-empty buckets: the TSDB may store a histogram with
// extra empty buckets when it merges bucket layouts within a chunk.
func storedEquals(it chunkenc.Iterator, vt chunkenc.ValueType, v point) bool {
	switch {
	case v.h != nil:
		if vt != chunkenc.ValHistogram {
			return false
		}
		_, h := it.AtHistogram(nil)
		return sameHistogram(h.ToFloat(nil), v.h.ToFloat(nil))
	case v.fh != nil:
		if vt != chunkenc.ValFloatHistogram {
			return false
		}
		_, fh := it.AtFloatHistogram(nil)
		return sameHistogram(fh, v.fh)
	default:
		if vt != chunkenc.ValFloat {
			return false
		}
		_, f := it.At()
		return math.Float64bits(f) == math.Float64bits(v.v)
	}
}

func sameHistogram(a, b *histogram.FloatHistogram) bool {
	same := func(x, y float64) bool { return math.Float64bits(x) == math.Float64bits(y) }
	if a.Schema != b.Schema || !same(a.Count, b.Count) || !same(a.Sum, b.Sum) ||
		a.ZeroThreshold != b.ZeroThreshold || !same(a.ZeroCount, b.ZeroCount) ||
		!histogram.CustomBucketBoundsMatch(a.CustomValues, b.CustomValues) {
		return false
	}
	return sameBuckets(a.PositiveBucketIterator(), b.PositiveBucketIterator()) &&
		sameBuckets(a.NegativeBucketIterator(), b.NegativeBucketIterator())
}

// sameBuckets compares two bucket sequences ignoring empty buckets.
func sameBuckets(a, b histogram.BucketIterator[float64]) bool {
	next := func(it histogram.BucketIterator[float64]) (histogram.Bucket[float64], bool) {
		for it.Next() {
			if bk := it.At(); bk.Count != 0 {
				return bk, true
			}
		}
		return histogram.Bucket[float64]{}, false
	}
	for {
		ba, oka := next(a)
		bb, okb := next(b)
		if oka != okb {
			return false
		}
		if !oka {
			return true
		}
		if ba.Index != bb.Index || math.Float64bits(ba.Count) != math.Float64bits(bb.Count) {
			return false
		}
	}
}

// markStoredExemplars marks the candidate exemplars present in the
// exemplar storage.
func markStoredExemplars(eq storage.ExemplarQuerier, ls labels.Labels, matchers []*labels.Matcher, cands []*candidate) {
	minT, maxT := cands[0].ex.Ts, cands[0].ex.Ts
	for _, c := range cands {
		minT, maxT = min(minT, c.ex.Ts), max(maxT, c.ex.Ts)
	}
	res, err := eq.Select(minT, maxT, matchers)
	if err != nil {
		return
	}
	for _, r := range res {
		if !labels.Equal(r.SeriesLabels, ls) {
			continue
		}
		for _, c := range cands {
			for _, e := range r.Exemplars {
				if e.Ts == c.ex.Ts && math.Float64bits(e.Value) == math.Float64bits(c.ex.Value) && labels.Equal(e.Labels, c.ex.Labels) {
					c.replay = true
					break
				}
			}
		}
	}
}

// convertHistogram turns a remote-write histogram into the TSDB's integer or
// float histogram. Which one is decided by the type of the count, as in
// remote write; a zero count or bucket fields of the other type contradict
// it and are rejected rather than silently read as zero. Slices are copied:
// the TSDB keeps the newest histogram of each series, which must not pin or
// share the request's memory.
func convertHistogram(p *prompb.Histogram) (*histogram.Histogram, *histogram.FloatHistogram, error) {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", errInvalidHistogram, fmt.Sprintf(format, args...))
	}
	hint := counterResetHint(p.ResetHint)
	var (
		h   *histogram.Histogram
		fh  *histogram.FloatHistogram
		err error
	)
	if cf, isFloat := p.Count.(*prompb.Histogram_CountFloat); isFloat {
		if len(p.PositiveDeltas) > 0 || len(p.NegativeDeltas) > 0 {
			return nil, nil, invalid("float histogram with integer bucket deltas")
		}
		fh = &histogram.FloatHistogram{
			CounterResetHint: hint,
			Schema:           p.Schema,
			ZeroThreshold:    p.ZeroThreshold,
			Sum:              p.Sum,
			PositiveSpans:    convertSpans(p.PositiveSpans),
			NegativeSpans:    convertSpans(p.NegativeSpans),
			PositiveBuckets:  slices.Clone(p.PositiveCounts),
			NegativeBuckets:  slices.Clone(p.NegativeCounts),
			CustomValues:     slices.Clone(p.CustomValues),
		}
		if cf != nil {
			fh.Count = cf.CountFloat
		}
		switch z := p.ZeroCount.(type) {
		case nil:
		case *prompb.Histogram_ZeroCountFloat:
			if z != nil {
				fh.ZeroCount = z.ZeroCountFloat
			}
		default:
			return nil, nil, invalid("float histogram with an integer zero count")
		}
		if histogram.IsExponentialSchemaReserved(fh.Schema) && fh.Schema > histogram.ExponentialSchemaMax {
			err = fh.ReduceResolution(histogram.ExponentialSchemaMax)
		}
	} else {
		if len(p.PositiveCounts) > 0 || len(p.NegativeCounts) > 0 {
			return nil, nil, invalid("integer histogram with float bucket counts")
		}
		h = &histogram.Histogram{
			CounterResetHint: hint,
			Schema:           p.Schema,
			ZeroThreshold:    p.ZeroThreshold,
			Sum:              p.Sum,
			PositiveSpans:    convertSpans(p.PositiveSpans),
			NegativeSpans:    convertSpans(p.NegativeSpans),
			PositiveBuckets:  slices.Clone(p.PositiveDeltas),
			NegativeBuckets:  slices.Clone(p.NegativeDeltas),
			CustomValues:     slices.Clone(p.CustomValues),
		}
		if ci, ok := p.Count.(*prompb.Histogram_CountInt); ok && ci != nil {
			h.Count = ci.CountInt
		}
		switch z := p.ZeroCount.(type) {
		case nil:
		case *prompb.Histogram_ZeroCountInt:
			if z != nil {
				h.ZeroCount = z.ZeroCountInt
			}
		default:
			return nil, nil, invalid("integer histogram with a float zero count")
		}
		if histogram.IsExponentialSchemaReserved(h.Schema) && h.Schema > histogram.ExponentialSchemaMax {
			// Schemas above 8 are valid on the wire but not stored; like
			// Prometheus, keep the data at the finest stored resolution.
			err = h.ReduceResolution(histogram.ExponentialSchemaMax)
		}
	}
	if err != nil {
		return nil, nil, invalid("reduce resolution of schema %d: %v", p.Schema, err)
	}
	return h, fh, nil
}

func convertSpans(spans []prompb.BucketSpan) []histogram.Span {
	if len(spans) == 0 {
		return nil
	}
	out := make([]histogram.Span, len(spans))
	for i, s := range spans {
		out[i] = histogram.Span{Offset: s.Offset, Length: s.Length}
	}
	return out
}

func counterResetHint(h prompb.Histogram_ResetHint) histogram.CounterResetHint {
	switch h {
	case prompb.Histogram_RESET_HINT_YES:
		return histogram.CounterReset
	case prompb.Histogram_RESET_HINT_NO:
		return histogram.NotCounterReset
	case prompb.Histogram_RESET_HINT_GAUGE:
		return histogram.GaugeType
	default:
		return histogram.UnknownCounterReset
	}
}
