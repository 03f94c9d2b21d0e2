package tsdbstore

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// A request in a batch (batch.go): its series one by one (appendSeries),
// found through the tenant's series cache, whose look-ups of a series it
// knows are here beside their one caller (a series it does not know is
// seriescache.go's), then its samples checked against the batch and
// appended (appendFloats, appendHistograms, appendValue) and its refusals
// recorded for the answer; exemplars are exemplars.go's.

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
	if len(ts.Exemplars) == 0 {
		// Most series carry none: Prometheus sends exemplars only when
		// told to.
		return nil
	}
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

// The tenant's series cache (seriescache.go) as appendSeries uses it for
// a series it knows: its look-ups, beside their one caller.

// trusted reports whether the references in the cache may be used: no
// removal of series was reported since it was emptied.
func (c *seriesCache) trusted() bool { return c.owner.epoch() == c.cleared }

// cacheKey appends to dst the cache's key of a request's labels: each
// name and value with its length in front, so that no two lists of labels
// share a key.
func cacheKey(dst []byte, ls []prompb.Label) []byte {
	for i := range ls {
		dst = appendLabel(dst, ls[i].Name, ls[i].Value)
	}
	return dst
}

// appendLabel appends one label to a key.
func appendLabel(dst []byte, name, value string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(name)))
	dst = append(dst, name...)
	dst = binary.AppendUvarint(dst, uint64(len(value)))
	return append(dst, value...)
}

// lookup returns the position of the entry of the series whose labels a
// request spelled ls, or -1 if there is none; it keeps their key in c.key
// for find and remember.
func (c *seriesCache) lookup(ls []prompb.Label) int {
	c.key = cacheKey(c.key[:0], ls)
	// A sender sends a tenant's series in much the same order, request
	// after request, wherever its requests begin and end: the series
	// that followed the previous one last time is checked first, by one
	// comparison of the keys, without the map's hash.
	if c.prev >= 0 {
		if i := c.series[c.prev].next - 1; i >= 0 && c.series[i].key == string(c.key) {
			c.prev = i
			return i
		}
	}
	i, ok := c.index[string(c.key)]
	if !ok {
		return -1
	}
	c.follow(i)
	return i
}

// follow notes that the series at position i came after the one looked up
// before it.
func (c *seriesCache) follow(i int) {
	if c.prev >= 0 {
		c.series[c.prev].next = i + 1
	}
	c.prev = i
}

// lastOf returns the newest sample of the series at position i in the
// holder's appender; none if the holder appended none.
func (c *seriesCache) lastOf(i int) lastAppended {
	if e := &c.series[i]; e.gen == c.gen {
		return e.last
	}
	return lastAppended{}
}

// set records the series at position i: its reference and labels when
// ref is not 0, and its newest sample in the holder's appender when
// last.ok.
func (c *seriesCache) set(i int, ref storage.SeriesRef, ls labels.Labels, last lastAppended) {
	e := &c.series[i]
	if ref != 0 {
		e.ref, e.ls = ref, ls
	}
	if !last.ok {
		return
	}
	if last.val.h != nil || last.val.fh != nil {
		c.histograms = append(c.histograms, i)
	}
	e.last, e.gen = last, c.gen
}

// The request's samples: each checked against the grace periods and the
// batch's pending samples, then appended, or its refusal recorded.

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
