package tsdbstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

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

// rejection is one rejected sample or exemplar.
type rejection struct {
	seq    int // position in the request, to report the first rejection
	series labels.Labels
	err    error
	class  errClass
}

// lastAppended is the newest sample appended to a series in this appender,
// and the request that appended it, against which later samples of that
// series are checked: the TSDB checks them against committed data only,
// and would silently drop a sample made out of order or duplicate by the
// appender's own pending samples at Commit.
type lastAppended struct {
	val point
	req int // the appender's request that appended it (appender.requests)
	ok  bool
}

// batch appends one request to one tenant's TSDB, in an appender it may
// share with the requests before it.
type batch struct {
	s   *Store
	t   *tenantDB
	a   *appender
	app storage.AppenderV2
	ex  storage.ExemplarAppenderV2
	// index is the request's position in the appender: samples a request
	// before it appended are pending, not committed, and are checked the
	// way the TSDB would check them had they been (see appendValue).
	index int
	// bound is the oldest timestamp the request may append because of the
	// samples of the requests before it: the head refuses samples older
	// than half a block before its newest one, and committed alone those
	// requests would have moved its newest one. math.MinInt64 when the
	// requests before it appended nothing.
	bound int64

	builder  *labels.ScratchBuilder
	scratch  labels.Labels // reused for series lookups only, never retained
	maxT     int64         // newest acceptable timestamp; math.MaxInt64 without a grace period
	minT     int64         // oldest acceptable timestamp; math.MinInt64 without a past grace period
	accepted int64
	rejected int64
	seq      int
	series   int        // TimeSeries in the request, to size maps by
	first    *rejection // first rejection that is not a candidate
	cands    []candidate
	codes    map[string]int // rejections by metric reason
}

// appendRequest appends every sample, histogram and exemplar of req in one
// appender and commits it. Samples the TSDB refuses are skipped and reported
// in a ClientError; any other failure rolls everything back and returns a
// server error.
func (s *Store) appendRequest(ctx context.Context, t *tenantDB, tenant string, req *prompb.WriteRequest) (backend.Result, error) {
	a, err := s.newAppender(ctx, t, tenant)
	if err != nil {
		return backend.Result{}, err
	}
	b, err := a.add(ctx, req)
	if err != nil {
		a.rollback()
		return backend.Result{}, err
	}
	if err := a.commit(); err != nil {
		return backend.Result{}, err
	}
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
	var (
		ref storage.SeriesRef
		ls  labels.Labels
	)
	// entry is the series' position in the tenant's series cache c, when
	// the appender holds it, or -1; missed says the request's spelling of
	// the series is not in the cache.
	c, entry, missed := b.a.cache, -1, false
	if c != nil {
		entry = c.lookup(ts.Labels)
		missed = entry < 0
		if !missed && c.trusted() {
			ref, ls = c.series[entry].ref, c.series[entry].ls
		}
	}
	if ref == 0 {
		var ok bool
		if ref, ls, ok = b.findSeries(ts); !ok {
			return nil
		}
		if missed {
			entry = c.find(ls, b.a.tenant != "")
		}
	}
	if ref == 0 && b.s.cfg.MaxSeriesPerTenant > 0 {
		// Hold the tenant's series lock while this TimeSeries may create
		// its series, so the limit check and the creation are atomic.
		b.t.seriesMu.Lock()
		defer b.t.seriesMu.Unlock()
		if ref, _ = b.getRef(ls); ref == 0 {
			n, err := b.headSeries()
			if err != nil {
				return err
			}
			if n >= uint64(b.s.cfg.MaxSeriesPerTenant) {
				b.rejectSeries(ts, ls, fmt.Errorf("%w: the tenant has %d series, the limit is %d (-limits.max-series-per-tenant)",
					errSeriesLimit, n, b.s.cfg.MaxSeriesPerTenant))
				return nil
			}
			if b.a.tenant != "" {
				// Counted before it exists: a series the head then
				// refuses to create only makes the count high, which a
				// recount at the limit corrects.
				b.t.seriesCreated(b.a.tenant)
			}
		}
	}

	last := b.lastOf(c, entry, ref)
	var err error
	if ref, last, err = b.appendFloats(tsIndex, ls, ref, last, ts.Samples); err != nil {
		return err
	}
	if ref, last, err = b.appendHistograms(tsIndex, ls, ref, last, ts.Histograms); err != nil {
		return err
	}
	b.setLast(c, entry, missed, ref, ls, last)
	return b.appendExemplars(tsIndex, ls, ref, ts.Exemplars)
}

// lastOf returns the series' newest sample in the appender: kept in its
// entry of the series cache c when the appender holds it, else in the
// appender's map by reference. A series without an entry has none: the
// entry is made when the series is first appended to.
func (b *batch) lastOf(c *seriesCache, entry int, ref storage.SeriesRef) lastAppended {
	switch {
	case c != nil && entry >= 0:
		return c.lastOf(entry)
	case c == nil && ref != 0:
		return b.a.last[ref]
	}
	return lastAppended{}
}

// setLast records the series' reference and newest sample in the appender
// where lastOf finds them; missed says the request's spelling of the
// series was not in the cache.
func (b *batch) setLast(c *seriesCache, entry int, missed bool, ref storage.SeriesRef, ls labels.Labels, last lastAppended) {
	if c != nil {
		if missed {
			if ref == 0 {
				// Nothing appended and no series: nothing to remember.
				return
			}
			entry = c.remember(entry)
		}
		c.set(entry, ref, ls, last)
		return
	}
	if ref != 0 && last.ok {
		if b.a.last == nil {
			// Sized for the request: most of its series are new to the
			// map, and growing it a few times cost more than the lookups.
			b.a.last = make(map[storage.SeriesRef]lastAppended, b.series)
		}
		b.a.last[ref] = last
	}
}

// findSeries builds the series' labels from ts's and looks them up in the
// head. It returns the head's reference and labels of the series, or 0 and
// labels of its own to create it with; false when the series is rejected.
func (b *batch) findSeries(ts *prompb.TimeSeries) (storage.SeriesRef, labels.Labels, bool) {
	b.builder.Reset()
	// Senders send labels sorted by name; checking that while adding them
	// costs less than sorting them again (a comparison through a closure
	// per label even when they are in order).
	sorted, prev := true, ""
	// In the shared TSDB the tenant's label goes where it sorts, so that
	// labels sent sorted stay sorted.
	tenant := b.a.tenant
	for _, l := range ts.Labels {
		if b.a.tenant != "" && l.Name == tenantLabel && l.Value != "" {
			b.rejectSeries(ts, sentLabels(ts), fmt.Errorf("%w: %s names the tenant in the shared TSDB (-storage.tenancy=shared)", errReservedLabel, tenantLabel))
			return 0, labels.EmptyLabels(), false
		}
		if tenant != "" && l.Name > tenantLabel {
			b.builder.Add(tenantLabel, tenant)
			sorted, prev, tenant = sorted && prev < tenantLabel, tenantLabel, ""
		}
		// Prometheus treats a label with an empty value as absent:
		// {job="a",x=""} is the series {job="a"}.
		if l.Value != "" {
			b.builder.Add(l.Name, l.Value)
			sorted = sorted && prev < l.Name
			prev = l.Name
		}
	}
	if tenant != "" {
		b.builder.Add(tenantLabel, tenant)
		sorted = sorted && prev < tenantLabel
	}
	if !sorted {
		b.builder.Sort()
	}
	// Look the series up with reused memory and keep the head's own copy of
	// its labels: in steady state no series is new, and this saves an
	// allocation per series. Only a new series needs labels of its own,
	// since the head keeps them.
	b.builder.Overwrite(&b.scratch)
	ref, ls := b.getRef(b.scratch)
	if ref == 0 {
		ls = b.builder.Labels()
	}
	return ref, ls, true
}

// headSeries returns the tenant's series in the head, for the series limit.
// b.t.seriesMu is held.
func (b *batch) headSeries() (uint64, error) {
	if b.a.tenant == "" {
		return b.t.db.Head().NumSeries(), nil
	}
	return b.t.tenantSeries(b.a.tenant, uint64(b.s.cfg.MaxSeriesPerTenant)) //nolint:gosec // Validate refuses a negative limit
}

// rejectSeries rejects every sample, histogram and exemplar of ts for err.
func (b *batch) rejectSeries(ts *prompb.TimeSeries, ls labels.Labels, err error) {
	for range len(ts.Samples) + len(ts.Histograms) + len(ts.Exemplars) {
		b.reject(ls, err)
	}
}

// sentLabels are the series' labels as sent, for an error message.
func sentLabels(ts *prompb.TimeSeries) labels.Labels {
	b := labels.NewScratchBuilder(len(ts.Labels))
	for _, l := range ts.Labels {
		b.Add(l.Name, l.Value)
	}
	b.Sort()
	return b.Labels()
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
	if v.t < b.minT {
		b.reject(ls, fmt.Errorf("%w: timestamp %d is more than %v before now (-limits.past-grace-period)",
			errTooOld, v.t, b.s.cfg.PastGracePeriod))
		return ref, last, nil
	}
	if last.ok && last.req == b.index {
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
	if v.t < b.bound {
		b.refused(tsIndex, ls, v, storage.ErrOutOfBounds)
		return ref, last, nil
	}
	if last.ok && last.req != b.index && v.t <= last.val.t {
		// The series' newest sample is a pending one of an earlier
		// request, which the TSDB does not check against.
		err := b.pendingConflict(v, last.val)
		if err != nil {
			b.refused(tsIndex, ls, v, err)
			return ref, last, nil
		}
		// Accepted as the TSDB accepts the same sample again, which makes
		// it the newest sample of the series in this request.
		b.accepted++
		return ref, lastAppended{val: v, req: b.index, ok: true}, nil
	}
	newRef, err := b.app.Append(ref, ls, 0, v.t, v.v, v.h, v.fh, storage.AOptions{})
	if err != nil {
		c := classify(err)
		if !c.client {
			return ref, last, fmt.Errorf("append to series %s: %w", ls, err)
		}
		b.refusedClassified(tsIndex, ls, v, err, c)
		return ref, last, nil
	}
	b.accepted++
	if !b.a.appended || v.t > b.a.maxT {
		b.a.maxT, b.a.appended = v.t, true
	}
	if !last.ok || last.req != b.index || v.t > last.val.t {
		last = lastAppended{val: v, req: b.index, ok: true}
	}
	return newRef, last, nil
}

// pendingConflict returns the error the TSDB would have given v had the
// requests before this one been committed, with prev, the series' newest
// sample, among them and v not newer than it; nil when it would have
// accepted v (the same sample again, which it ignores). It follows the
// head's own checks (memSeries.appendable and its histogram variants) for
// a TSDB without an out-of-order window: PushBatch shares no appender
// between requests when there is one.
func (b *batch) pendingConflict(v, prev point) error {
	if v.t < prev.t {
		if minValid, ok := b.t.db.Head().AppendableMinValidTime(); ok && v.t < minValid {
			return storage.ErrOutOfBounds
		}
		return storage.ErrOutOfOrderSample
	}
	if v.identical(prev) {
		return nil
	}
	switch {
	case v.h != nil || v.fh != nil:
		return storage.ErrDuplicateSampleForTimestamp
	case prev.h != nil || prev.fh != nil:
		return storage.NewDuplicateHistogramToFloatErr(v.t, v.v)
	default:
		return storage.NewDuplicateFloatErr(v.t, prev.v, v.v)
	}
}

// refused records a sample the TSDB refuses, or would have, with err.
func (b *batch) refused(tsIndex int, ls labels.Labels, v point, err error) {
	b.refusedClassified(tsIndex, ls, v, err, classify(err))
}

// refusedClassified records a refused sample as a candidate for a replay
// when the TSDB may have refused it for being stored already, else as
// rejected.
func (b *batch) refusedClassified(tsIndex int, ls labels.Labels, v point, err error, c errClass) {
	if replayable(err) {
		b.candidate(tsIndex, ls, err, c, candidate{val: v})
	} else {
		b.rejectClassified(ls, err, c)
	}
}

// duplicateErr describes a second sample at a timestamp with another value.
func duplicateErr(v, prev point) error {
	if v.h == nil && v.fh == nil && prev.h == nil && prev.fh == nil {
		return storage.NewDuplicateFloatErr(v.t, prev.v, v.v)
	}
	return fmt.Errorf("%w: timestamp %d appears twice in the request with different values",
		storage.ErrDuplicateSampleForTimestamp, v.t)
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
		if ep.Timestamp < b.minT {
			b.reject(ls, fmt.Errorf("exemplar: %w: timestamp %d is more than %v before now (-limits.past-grace-period)",
				errTooOld, ep.Timestamp, b.s.cfg.PastGracePeriod))
			continue
		}
		if ep.Timestamp > b.maxT {
			b.reject(ls, fmt.Errorf("exemplar: %w: timestamp %d is more than %v ahead of now (-limits.creation-grace-period)",
				errTooFarInFuture, ep.Timestamp, b.s.cfg.CreationGracePeriod))
			continue
		}
		b.builder.Reset()
		for _, l := range ep.Labels {
			if l.Value != "" {
				b.builder.Add(l.Name, l.Value)
			}
		}
		b.builder.Sort()
		exs = append(exs, exemplar.Exemplar{Labels: b.builder.Labels(), Value: ep.Value, Ts: ep.Timestamp, HasTs: true})
	}
	if len(exs) == 0 {
		return nil
	}
	// AppendExemplars requires them in timestamp order.
	slices.SortStableFunc(exs, exemplar.Compare)
	b.a.exemplars = true
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
	series := first.series
	if b.a.tenant != "" && !errors.Is(first.err, errReservedLabel) {
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
