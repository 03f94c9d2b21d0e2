package tsdbstore

import (
	"errors"
	"fmt"
	"slices"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// appendExemplars appends a TimeSeries' exemplars, of which it has one at
// least, to the series ref. They are checked against the grace periods as
// samples are; the exemplar storage's own refusals are rejections, or
// replay candidates when it may have refused them for being stored
// already.
func (r *request) appendExemplars(tsIndex int, ls labels.Labels, ref storage.SeriesRef, eps []prompb.Exemplar) error {
	if r.w.cfg.MaxExemplars == 0 {
		// Storage is off by configuration, not because of the data.
		r.accepted += int64(len(eps))
		r.w.metrics.exemplarsDropped.Add(float64(len(eps)))
		return nil
	}
	exs := make([]exemplar.Exemplar, 0, len(eps))
	for _, ep := range eps {
		if ep.Timestamp < r.minT {
			r.reject(ls, fmt.Errorf("exemplar: %w: timestamp %d is more than %v before now (-limits.past-grace-period)",
				errTooOld, ep.Timestamp, r.w.cfg.PastGracePeriod))
			continue
		}
		if ep.Timestamp > r.maxT {
			r.reject(ls, fmt.Errorf("exemplar: %w: timestamp %d is more than %v ahead of now (-limits.creation-grace-period)",
				errTooFarInFuture, ep.Timestamp, r.w.cfg.CreationGracePeriod))
			continue
		}
		r.builder.Reset()
		for _, l := range ep.Labels {
			if l.Value != "" {
				r.builder.Add(l.Name, l.Value)
			}
		}
		r.builder.Sort()
		exs = append(exs, exemplar.Exemplar{Labels: r.builder.Labels(), Value: ep.Value, Ts: ep.Timestamp, HasTs: true})
	}
	if len(exs) == 0 {
		return nil
	}
	// AppendExemplars requires them in timestamp order.
	slices.SortStableFunc(exs, exemplar.Compare)
	r.batch.exemplars = true
	_, err := r.ex.AppendExemplars(ref, ls, exs)
	if err == nil {
		r.accepted += int64(len(exs))
		return nil
	}
	var partial *storage.AppendPartialError
	if !errors.As(err, &partial) {
		c := classify(err)
		if !c.client {
			return fmt.Errorf("append exemplars to series %s: %w", ls, err)
		}
		for range exs {
			r.rejectClassified(ls, err, c)
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
			r.accepted++
			continue
		}
		c := classify(ferr)
		if !c.client {
			return fmt.Errorf("append exemplar to series %s: %w", ls, ferr)
		}
		if replayable(ferr) {
			r.candidate(tsIndex, ls, ferr, c, candidate{ex: exs[i], isExemplar: true})
		} else {
			r.rejectClassified(ls, ferr, c)
		}
	}
	return nil
}
