package limits

import (
	"errors"
	"fmt"
	"slices"

	"github.com/prometheus/prometheus/model/histogram"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// ErrInvalidHistogram is wrapped by CheckHistogram's errors.
var ErrInvalidHistogram = errors.New("invalid native histogram")

// CheckHistogram reports why the TSDB would refuse the remote-write
// native histogram p without looking at what is stored, or nil: the kind
// of its count (integer or float) contradicted by its buckets or zero
// count, a schema outside Prometheus' range, spans that do not cover the
// buckets, negative bucket counts, or a count that is not the sum of the
// buckets (histogram.Validate, which the TSDB's head applies to every
// histogram it appends). Schemas 9 to 52 are valid on the wire and
// reduced to 8 before storing, as the pusher's TSDB does; only those cost
// a copy of the buckets here.
func CheckHistogram(p *prompb.Histogram) error {
	if err := checkHistogram(p); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidHistogram, err)
	}
	return nil
}

func checkHistogram(p *prompb.Histogram) error {
	if _, isFloat := p.Count.(*prompb.Histogram_CountFloat); isFloat {
		if len(p.PositiveDeltas) > 0 || len(p.NegativeDeltas) > 0 {
			return errors.New("float histogram with integer bucket deltas")
		}
		if _, ok := p.ZeroCount.(*prompb.Histogram_ZeroCountInt); ok {
			return errors.New("float histogram with an integer zero count")
		}
		fh := floatHistogram(p)
		if reserved(fh.Schema) {
			fh.PositiveBuckets, fh.NegativeBuckets = slices.Clone(fh.PositiveBuckets), slices.Clone(fh.NegativeBuckets)
			fh.PositiveSpans, fh.NegativeSpans = slices.Clone(fh.PositiveSpans), slices.Clone(fh.NegativeSpans)
			if err := fh.ReduceResolution(histogram.ExponentialSchemaMax); err != nil {
				return fmt.Errorf("reduce resolution of schema %d: %w", p.Schema, err)
			}
		}
		return fh.Validate()
	}
	if len(p.PositiveCounts) > 0 || len(p.NegativeCounts) > 0 {
		return errors.New("integer histogram with float bucket counts")
	}
	if _, ok := p.ZeroCount.(*prompb.Histogram_ZeroCountFloat); ok {
		return errors.New("integer histogram with a float zero count")
	}
	h := intHistogram(p)
	if reserved(h.Schema) {
		h.PositiveBuckets, h.NegativeBuckets = slices.Clone(h.PositiveBuckets), slices.Clone(h.NegativeBuckets)
		h.PositiveSpans, h.NegativeSpans = slices.Clone(h.PositiveSpans), slices.Clone(h.NegativeSpans)
		if err := h.ReduceResolution(histogram.ExponentialSchemaMax); err != nil {
			return fmt.Errorf("reduce resolution of schema %d: %w", p.Schema, err)
		}
	}
	return h.Validate()
}

// reserved reports whether schema is one the TSDB reduces before storing.
func reserved(schema int32) bool {
	return histogram.IsExponentialSchemaReserved(schema) && schema > histogram.ExponentialSchemaMax
}

// intHistogram is p as the TSDB's integer histogram, sharing p's buckets.
func intHistogram(p *prompb.Histogram) *histogram.Histogram {
	h := &histogram.Histogram{
		Schema:          p.Schema,
		ZeroThreshold:   p.ZeroThreshold,
		Sum:             p.Sum,
		PositiveSpans:   spans(p.PositiveSpans),
		NegativeSpans:   spans(p.NegativeSpans),
		PositiveBuckets: p.PositiveDeltas,
		NegativeBuckets: p.NegativeDeltas,
		CustomValues:    p.CustomValues,
	}
	if c, ok := p.Count.(*prompb.Histogram_CountInt); ok && c != nil {
		h.Count = c.CountInt
	}
	if z, ok := p.ZeroCount.(*prompb.Histogram_ZeroCountInt); ok && z != nil {
		h.ZeroCount = z.ZeroCountInt
	}
	return h
}

// floatHistogram is p as the TSDB's float histogram, sharing p's buckets.
func floatHistogram(p *prompb.Histogram) *histogram.FloatHistogram {
	fh := &histogram.FloatHistogram{
		Schema:          p.Schema,
		ZeroThreshold:   p.ZeroThreshold,
		Sum:             p.Sum,
		PositiveSpans:   spans(p.PositiveSpans),
		NegativeSpans:   spans(p.NegativeSpans),
		PositiveBuckets: p.PositiveCounts,
		NegativeBuckets: p.NegativeCounts,
		CustomValues:    p.CustomValues,
	}
	if c, ok := p.Count.(*prompb.Histogram_CountFloat); ok && c != nil {
		fh.Count = c.CountFloat
	}
	if z, ok := p.ZeroCount.(*prompb.Histogram_ZeroCountFloat); ok && z != nil {
		fh.ZeroCount = z.ZeroCountFloat
	}
	return fh
}

// spans converts bucket spans; the two types have the same layout, but
// converting one by one keeps that an assumption nobody has to check.
func spans(in []prompb.BucketSpan) []histogram.Span {
	if len(in) == 0 {
		return nil
	}
	out := make([]histogram.Span, len(in))
	for i, s := range in {
		out[i] = histogram.Span{Offset: s.Offset, Length: s.Length}
	}
	return out
}

// filterHistograms drops the histograms of ts that CheckHistogram
// refuses, and says why for the first one.
func filterHistograms(ts *prompb.TimeSeries) (dropped int64, reason string) {
	ts.Histograms = filterSlice(ts.Histograms, func(h prompb.Histogram) bool {
		err := CheckHistogram(&h)
		if err != nil {
			if reason == "" {
				reason = err.Error()
			}
			dropped++
		}
		return err != nil
	})
	return dropped, reason
}
