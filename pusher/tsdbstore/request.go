package tsdbstore

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

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

// lastAppended is the newest sample appended to a series in this batch,
// and the request that appended it, against which later samples of that
// series are checked: the TSDB checks them against committed data only,
// and would silently drop a sample made out of order or duplicate by the
// batch's own pending samples at Commit.
type lastAppended struct {
	val point
	req int // the batch's request that appended it (batch.requests)
	ok  bool
}

// request is one write request being appended to a tenant's TSDB in a
// batch, which it may share with the requests before it: what it appended,
// what was refused and why, until the batch is committed and result
// answers it.
type request struct {
	w     *writer
	t     *tenantDB
	batch *batch
	app   storage.AppenderV2
	ex    storage.ExemplarAppenderV2
	// index is the request's position in the batch: samples a request
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

// appendSeries appends one TimeSeries. It returns an error only for a
// failure that must abort the request; rejected samples are recorded.
//
// The request's strings are only borrowed (see backend.Backend): everything
// kept past Push goes through ScratchBuilder.Labels, which with Prometheus'
// default stringlabels implementation copies names and values into one new
// string. Built with -tags slicelabels it would not, and the head would keep
// strings of reused buffers; TestStoreKeepsNothingOfAStreamRequest fails then.
func (r *request) appendSeries(tsIndex int, ts *prompb.TimeSeries) error {
	var (
		ref storage.SeriesRef
		ls  labels.Labels
	)
	// entry is the series' position in the tenant's series cache c, when
	// the batch holds it, or -1; missed says the request's spelling of
	// the series is not in the cache.
	c, entry, missed := r.batch.cache, -1, false
	if c != nil {
		entry = c.lookup(ts.Labels)
		missed = entry < 0
		if !missed && c.trusted() {
			ref, ls = c.series[entry].ref, c.series[entry].ls
		}
	}
	if ref == 0 {
		var ok bool
		if ref, ls, ok = r.findSeries(ts); !ok {
			return nil
		}
		if missed {
			entry = c.find(ls, r.batch.tenant != "")
		}
	}
	if ref == 0 && r.w.cfg.MaxSeriesPerTenant > 0 {
		// Hold the tenant's series lock while this TimeSeries may create
		// its series, so the limit check and the creation are atomic.
		r.t.seriesMu.Lock()
		defer r.t.seriesMu.Unlock()
		if ref, _ = r.getRef(ls); ref == 0 {
			n, err := r.headSeries()
			if err != nil {
				return err
			}
			if n >= uint64(r.w.cfg.MaxSeriesPerTenant) {
				r.rejectSeries(ts, ls, fmt.Errorf("%w: the tenant has %d series, the limit is %d (-limits.max-series-per-tenant)",
					errSeriesLimit, n, r.w.cfg.MaxSeriesPerTenant))
				return nil
			}
			if r.batch.tenant != "" {
				// Counted before it exists: a series the head then
				// refuses to create only makes the count high, which a
				// recount at the limit corrects.
				r.t.seriesCreated(r.batch.tenant)
			}
		}
	}

	last := r.lastOf(c, entry, ref)
	var err error
	if ref, last, err = r.appendFloats(tsIndex, ls, ref, last, ts.Samples); err != nil {
		return err
	}
	if ref, last, err = r.appendHistograms(tsIndex, ls, ref, last, ts.Histograms); err != nil {
		return err
	}
	r.setLast(c, entry, missed, ref, ls, last)
	return r.appendExemplars(tsIndex, ls, ref, ts.Exemplars)
}

// lastOf returns the series' newest sample in the batch: kept in its
// entry of the series cache c when the batch holds it, else in the
// batch's map by reference. A series without an entry has none: the
// entry is made when the series is first appended to.
func (r *request) lastOf(c *seriesCache, entry int, ref storage.SeriesRef) lastAppended {
	switch {
	case c != nil && entry >= 0:
		return c.lastOf(entry)
	case c == nil && ref != 0:
		return r.batch.last[ref]
	}
	return lastAppended{}
}

// setLast records the series' reference and newest sample in the batch
// where lastOf finds them; missed says the request's spelling of the
// series was not in the cache.
func (r *request) setLast(c *seriesCache, entry int, missed bool, ref storage.SeriesRef, ls labels.Labels, last lastAppended) {
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
		if r.batch.last == nil {
			// Sized for the request: most of its series are new to the
			// map, and growing it a few times cost more than the lookups.
			r.batch.last = make(map[storage.SeriesRef]lastAppended, r.series)
		}
		r.batch.last[ref] = last
	}
}

// findSeries builds the series' labels from ts's and looks them up in the
// head. It returns the head's reference and labels of the series, or 0 and
// labels of its own to create it with; false when the series is rejected.
func (r *request) findSeries(ts *prompb.TimeSeries) (storage.SeriesRef, labels.Labels, bool) {
	r.builder.Reset()
	// Senders send labels sorted by name; checking that while adding them
	// costs less than sorting them again (a comparison through a closure
	// per label even when they are in order).
	sorted, prev := true, ""
	// In the shared TSDB the tenant's label goes where it sorts, so that
	// labels sent sorted stay sorted.
	tenant := r.batch.tenant
	for _, l := range ts.Labels {
		if r.batch.tenant != "" && l.Name == tenantLabel && l.Value != "" {
			r.rejectSeries(ts, sentLabels(ts), fmt.Errorf("%w: %s names the tenant in the shared TSDB (-storage.tenancy=shared)", errReservedLabel, tenantLabel))
			return 0, labels.EmptyLabels(), false
		}
		if tenant != "" && l.Name > tenantLabel {
			r.builder.Add(tenantLabel, tenant)
			sorted, prev, tenant = sorted && prev < tenantLabel, tenantLabel, ""
		}
		// Prometheus treats a label with an empty value as absent:
		// {job="a",x=""} is the series {job="a"}.
		if l.Value != "" {
			r.builder.Add(l.Name, l.Value)
			sorted = sorted && prev < l.Name
			prev = l.Name
		}
	}
	if tenant != "" {
		r.builder.Add(tenantLabel, tenant)
		sorted = sorted && prev < tenantLabel
	}
	if !sorted {
		r.builder.Sort()
	}
	// Look the series up with reused memory and keep the head's own copy of
	// its labels: in steady state no series is new, and this saves an
	// allocation per series. Only a new series needs labels of its own,
	// since the head keeps them.
	r.builder.Overwrite(&r.scratch)
	ref, ls := r.getRef(r.scratch)
	if ref == 0 {
		ls = r.builder.Labels()
	}
	return ref, ls, true
}

// headSeries returns the tenant's series in the head, for the series limit.
// r.t.seriesMu is held.
func (r *request) headSeries() (uint64, error) {
	if r.batch.tenant == "" {
		return r.t.db.Head().NumSeries(), nil
	}
	return r.t.tenantSeries(r.batch.tenant, uint64(r.w.cfg.MaxSeriesPerTenant)) //nolint:gosec // Validate refuses a negative limit
}

// rejectSeries rejects every sample, histogram and exemplar of ts for err.
func (r *request) rejectSeries(ts *prompb.TimeSeries, ls labels.Labels, err error) {
	for range len(ts.Samples) + len(ts.Histograms) + len(ts.Exemplars) {
		r.reject(ls, err)
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
func (r *request) getRef(ls labels.Labels) (storage.SeriesRef, labels.Labels) {
	if g, ok := r.app.(storage.GetRef); ok {
		return g.GetRef(ls, ls.Hash())
	}
	return 0, labels.EmptyLabels()
}

func (r *request) appendFloats(tsIndex int, ls labels.Labels, ref storage.SeriesRef, last lastAppended, samples []prompb.Sample) (storage.SeriesRef, lastAppended, error) {
	if !slices.IsSortedFunc(samples, func(a, b prompb.Sample) int { return cmp.Compare(a.Timestamp, b.Timestamp) }) {
		// Senders send samples in order; sorting the rare exception lets
		// the TSDB accept all of them instead of the newest only.
		samples = slices.Clone(samples)
		slices.SortStableFunc(samples, func(a, b prompb.Sample) int { return cmp.Compare(a.Timestamp, b.Timestamp) })
	}
	for _, smp := range samples {
		var err error
		ref, last, err = r.appendValue(tsIndex, ls, ref, last, point{t: smp.Timestamp, v: smp.Value})
		if err != nil {
			return ref, last, err
		}
	}
	return ref, last, nil
}

func (r *request) appendHistograms(tsIndex int, ls labels.Labels, ref storage.SeriesRef, last lastAppended, hs []prompb.Histogram) (storage.SeriesRef, lastAppended, error) {
	order := func(a, b prompb.Histogram) int { return cmp.Compare(a.Timestamp, b.Timestamp) }
	if !slices.IsSortedFunc(hs, order) {
		hs = slices.Clone(hs)
		slices.SortStableFunc(hs, order)
	}
	for i := range hs {
		h, fh, err := convertHistogram(&hs[i])
		if err != nil {
			r.reject(ls, err)
			continue
		}
		ref, last, err = r.appendValue(tsIndex, ls, ref, last, point{t: hs[i].Timestamp, h: h, fh: fh})
		if err != nil {
			return ref, last, err
		}
	}
	return ref, last, nil
}

// appendValue appends one sample of any kind, or records why not.
func (r *request) appendValue(tsIndex int, ls labels.Labels, ref storage.SeriesRef, last lastAppended, v point) (storage.SeriesRef, lastAppended, error) {
	if v.t > r.maxT {
		r.reject(ls, fmt.Errorf("%w: timestamp %d is more than %v ahead of now (-limits.creation-grace-period)",
			errTooFarInFuture, v.t, r.w.cfg.CreationGracePeriod))
		return ref, last, nil
	}
	if v.t < r.minT {
		r.reject(ls, fmt.Errorf("%w: timestamp %d is more than %v before now (-limits.past-grace-period)",
			errTooOld, v.t, r.w.cfg.PastGracePeriod))
		return ref, last, nil
	}
	if last.ok && last.req == r.index {
		switch {
		case v.t == last.val.t && v.identical(last.val):
			// The same sample twice in one request: the TSDB would drop
			// the second at Commit; it is accepted as a no-op.
			r.accepted++
			return ref, last, nil
		case v.t == last.val.t:
			r.reject(ls, duplicateErr(v, last.val))
			return ref, last, nil
		case v.t < last.val.t && r.w.cfg.OutOfOrderWindow == 0:
			// Only possible when a series' floats and histograms, or two
			// TimeSeries of one series, interleave in time. With an
			// out-of-order window the TSDB sorts this out at Commit.
			r.reject(ls, fmt.Errorf("%w: timestamp %d is older than %d earlier in the same request",
				storage.ErrOutOfOrderSample, v.t, last.val.t))
			return ref, last, nil
		}
	}
	if v.t < r.bound {
		r.refused(tsIndex, ls, v, storage.ErrOutOfBounds)
		return ref, last, nil
	}
	if last.ok && last.req != r.index && v.t <= last.val.t {
		// The series' newest sample is a pending one of an earlier
		// request, which the TSDB does not check against.
		err := r.pendingConflict(v, last.val)
		if err != nil {
			r.refused(tsIndex, ls, v, err)
			return ref, last, nil
		}
		// Accepted as the TSDB accepts the same sample again, which makes
		// it the newest sample of the series in this request.
		r.accepted++
		return ref, lastAppended{val: v, req: r.index, ok: true}, nil
	}
	newRef, err := r.app.Append(ref, ls, 0, v.t, v.v, v.h, v.fh, storage.AOptions{})
	if err != nil {
		c := classify(err)
		if !c.client {
			return ref, last, fmt.Errorf("append to series %s: %w", ls, err)
		}
		r.refusedClassified(tsIndex, ls, v, err, c)
		return ref, last, nil
	}
	r.accepted++
	if !r.batch.appended || v.t > r.batch.maxT {
		r.batch.maxT, r.batch.appended = v.t, true
	}
	if !last.ok || last.req != r.index || v.t > last.val.t {
		last = lastAppended{val: v, req: r.index, ok: true}
	}
	return newRef, last, nil
}

// pendingConflict returns the error the TSDB would have given v had the
// requests before this one been committed, with prev, the series' newest
// sample, among them and v not newer than it; nil when it would have
// accepted v (the same sample again, which it ignores). It follows the
// head's own checks (memSeries.appendable and its histogram variants) for
// a TSDB without an out-of-order window: PushBatch shares no batch
// between requests when there is one.
func (r *request) pendingConflict(v, prev point) error {
	if v.t < prev.t {
		if minValid, ok := r.t.db.Head().AppendableMinValidTime(); ok && v.t < minValid {
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
func (r *request) refused(tsIndex int, ls labels.Labels, v point, err error) {
	r.refusedClassified(tsIndex, ls, v, err, classify(err))
}

// refusedClassified records a refused sample as a candidate for a replay
// when the TSDB may have refused it for being stored already, else as
// rejected.
func (r *request) refusedClassified(tsIndex int, ls labels.Labels, v point, err error, c errClass) {
	if replayable(err) {
		r.candidate(tsIndex, ls, err, c, candidate{val: v})
	} else {
		r.rejectClassified(ls, err, c)
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

func (r *request) reject(ls labels.Labels, err error) {
	r.rejectClassified(ls, err, classify(err))
}

func (r *request) rejectClassified(ls labels.Labels, err error, c errClass) {
	r.seq++
	r.rejected++
	r.codes[c.code]++
	if r.first == nil {
		r.first = &rejection{seq: r.seq, series: ls, err: err, class: c}
	}
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
