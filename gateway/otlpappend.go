package gateway

import (
	"errors"
	"fmt"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage"
)

// errTranslationTooLarge is what the appender answers every append with
// once the translated request is over its budget.
var errTranslationTooLarge = errors.New("translated request over its memory budget")

// Approximate sizes, in bytes, of what the appender keeps, charged against
// its budget before it keeps them: the structs and a slice header's share.
const (
	costSeries    = 128 // a prompb.TimeSeries and its index entry
	costLabel     = 40  // a prompb.Label, its strings' bytes apart
	costSample    = 48  // a prompb.Sample
	costHistogram = 256 // a prompb.Histogram, its spans and buckets apart
	costExemplar  = 64  // a prompb.Exemplar, its labels apart
)

// writeRequestAppender is the storage the OTLP translator appends to: it
// collects what the translator appends as one remote-write 1.0
// WriteRequest, a series per label set with its samples in the order
// appended, and a metadata entry per metric family. Upstream's prompb
// converters (FromLabels, FromIntHistogram, FromFloatHistogram,
// FromMetadataType) do the conversion, so that the request is what
// Prometheus's own remote-write code would send.
//
// It keeps at most budget bytes: past them every append fails with
// errTranslationTooLarge, which also ends the translator's loops (a
// target_info series has a sample every 2.5 minutes between a resource's
// earliest and latest point, however far apart a client puts them).
type writeRequestAppender struct {
	req      prompb.WriteRequest
	index    map[uint64][]int // series by label hash
	families map[string]bool  // metric families with metadata
	budget   int
	used     int
	over     bool
	points   int // samples, histograms and exemplars kept
}

func newWriteRequestAppender(budget int) *writeRequestAppender {
	return &writeRequestAppender{index: map[uint64][]int{}, families: map[string]bool{}, budget: budget}
}

// charge takes n bytes of the budget, or reports that they are not there.
func (a *writeRequestAppender) charge(n int) error {
	if a.over || a.used+n > a.budget {
		a.over = true
		return errTranslationTooLarge
	}
	a.used += n
	return nil
}

// Append keeps one sample (v, h or fh) of the series ls with its
// exemplars, and the family's metadata the first time the family is seen.
// The start timestamp st has no field in remote write 1.0 and is dropped.
func (a *writeRequestAppender) Append(_ storage.SeriesRef, ls labels.Labels, _, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, opts storage.AppendV2Options) (storage.SeriesRef, error) {
	i, err := a.series(ls)
	if err != nil {
		return 0, err
	}
	switch {
	case fh != nil:
		if err := a.charge(costHistogram + 8*(len(fh.PositiveSpans)+len(fh.NegativeSpans)+len(fh.PositiveBuckets)+len(fh.NegativeBuckets)+len(fh.CustomValues))); err != nil {
			return 0, err
		}
		a.req.Timeseries[i].Histograms = append(a.req.Timeseries[i].Histograms, prompb.FromFloatHistogram(t, fh))
	case h != nil:
		if err := a.charge(costHistogram + 8*(len(h.PositiveSpans)+len(h.NegativeSpans)+len(h.PositiveBuckets)+len(h.NegativeBuckets)+len(h.CustomValues))); err != nil {
			return 0, err
		}
		a.req.Timeseries[i].Histograms = append(a.req.Timeseries[i].Histograms, prompb.FromIntHistogram(t, h))
	default:
		if err := a.charge(costSample); err != nil {
			return 0, err
		}
		a.req.Timeseries[i].Samples = append(a.req.Timeseries[i].Samples, prompb.Sample{Value: v, Timestamp: t})
	}
	a.points += 1 + len(opts.Exemplars)
	for _, e := range opts.Exemplars {
		if err := a.charge(costExemplar + labelsCost(e.Labels)); err != nil {
			return 0, err
		}
		a.req.Timeseries[i].Exemplars = append(a.req.Timeseries[i].Exemplars, prompb.Exemplar{Labels: prompb.FromLabels(e.Labels, nil), Value: e.Value, Timestamp: e.Ts})
	}
	return 0, a.metadata(opts) // no references: the translator passes none
}

// series returns the index of ls's series, adding it when new.
func (a *writeRequestAppender) series(ls labels.Labels) (int, error) {
	hash := ls.Hash()
	for _, i := range a.index[hash] {
		if labels.Equal(ls, a.labelsAt(i)) {
			return i, nil
		}
	}
	if err := a.charge(costSeries + labelsCost(ls)); err != nil {
		return 0, err
	}
	a.req.Timeseries = append(a.req.Timeseries, prompb.TimeSeries{Labels: prompb.FromLabels(ls, nil)})
	i := len(a.req.Timeseries) - 1
	a.index[hash] = append(a.index[hash], i)
	return i, nil
}

func (a *writeRequestAppender) labelsAt(i int) labels.Labels {
	b := labels.NewScratchBuilder(len(a.req.Timeseries[i].Labels))
	return a.req.Timeseries[i].ToLabels(&b, nil)
}

// metadata keeps the family's type, unit and help once per family.
func (a *writeRequestAppender) metadata(opts storage.AppendV2Options) error {
	name := opts.MetricFamilyName
	if name == "" || opts.Metadata.IsEmpty() || a.families[name] {
		return nil
	}
	md := opts.Metadata
	if err := a.charge(costSeries + len(name) + len(md.Help) + len(md.Unit)); err != nil {
		return err
	}
	// MetricFamilyName's bytes live only for the call: copied.
	name = string([]byte(name))
	a.families[name] = true
	a.req.Metadata = append(a.req.Metadata, prompb.MetricMetadata{
		Type:             prompb.FromMetadataType(md.Type),
		MetricFamilyName: name,
		Help:             md.Help,
		Unit:             md.Unit,
	})
	return nil
}

// labelsCost is what ls takes as prompb labels.
func labelsCost(ls labels.Labels) int {
	return ls.Len()*costLabel + int(ls.ByteSize()) //nolint:gosec // a size, far under MaxInt
}

// Commit and Rollback end nothing: the request is produced by the caller.
func (a *writeRequestAppender) Commit() error { return nil }

// Rollback is Commit's counterpart; see Commit.
func (a *writeRequestAppender) Rollback() error { return nil }

// marshal encodes the request as remote-write 1.0 requests of at most
// maxSeries series each (0: one request), the metadata in the first.
func (a *writeRequestAppender) marshal(maxSeries int) ([][]byte, error) {
	ts := a.req.Timeseries
	if maxSeries <= 0 {
		maxSeries = max(len(ts), 1)
	}
	var out [][]byte
	for first := true; first || len(ts) > 0; first = false {
		n := min(len(ts), maxSeries)
		chunk := prompb.WriteRequest{Timeseries: ts[:n]}
		if first {
			chunk.Metadata = a.req.Metadata
		}
		b, err := chunk.Marshal()
		if err != nil {
			return nil, fmt.Errorf("marshal translated request: %w", err)
		}
		out = append(out, b)
		ts = ts[n:]
	}
	return out, nil
}
