package tsdbstore

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// Replay detection: after a crash the consumer resends requests the TSDB
// already holds, and the TSDB refuses their samples as out of order or too
// old without looking at the stored value. A refused sample found stored
// with the same value is a replay and counts as accepted.

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

// replayable reports whether err may have refused data already stored: the
// TSDB says "out of order" or "too old" without looking at the stored value,
// and only the newest sample of a series is exempt when identical.
func replayable(err error) bool {
	return errors.Is(err, storage.ErrOutOfOrderSample) ||
		errors.Is(err, storage.ErrOutOfBounds) ||
		errors.Is(err, storage.ErrTooOldSample) ||
		errors.Is(err, storage.ErrOutOfOrderExemplar)
}

func (r *request) candidate(tsIndex int, ls labels.Labels, err error, c errClass, cand candidate) {
	r.seq++
	cand.rejection = rejection{seq: r.seq, series: ls, err: err, class: c}
	cand.tsIndex = tsIndex
	r.cands = append(r.cands, cand)
}

// findReplays looks up the stored data for every candidate, of which
// there is one at least, and marks those already stored with the same
// value as replays. Failing to look is not an error: the candidates then
// stay rejected, as the TSDB said.
func (r *request) findReplays(ctx context.Context) {
	// One querier for all series, over the candidates' time range only, so
	// that blocks outside it are not opened.
	mint, maxt := int64(math.MaxInt64), int64(math.MinInt64)
	for _, c := range r.cands {
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
	for start := 0; start < len(r.cands); {
		end := start + 1
		for end < len(r.cands) && r.cands[end].tsIndex == r.cands[start].tsIndex {
			end++
		}
		group := r.cands[start:end]
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
				if q, err = r.t.db.Querier(mint, maxt); err != nil {
					r.w.logger.Debug("cannot look up replayed samples", "tenant", r.t.id, "err", err)
					return
				}
			}
			markStoredSamples(ctx, q, group[0].series, matchers, samples)
		}
		if len(exemplars) > 0 {
			if eq == nil {
				var err error
				if eq, err = r.t.db.ExemplarQuerier(ctx); err != nil {
					r.w.logger.Debug("cannot look up replayed exemplars", "tenant", r.t.id, "err", err)
					return
				}
			}
			markStoredExemplars(eq, group[0].series, matchers, exemplars)
		}
	}
	replays := 0
	for i := range r.cands {
		if r.cands[i].replay {
			replays++
		}
	}
	r.w.metrics.replaysAccepted.Add(float64(replays))
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
