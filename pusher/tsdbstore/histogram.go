package tsdbstore

import (
	"fmt"
	"slices"

	"github.com/prometheus/prometheus/model/histogram"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// Conversion of remote-write native histograms to the TSDB's. Upstream's
// prompb converters (Histogram.ToIntHistogram, ToFloatHistogram) do not fit:
// they are methods of github.com/prometheus/prometheus/prompb's types, not
// of Ferry's generated proto/prompb; they share the request's slices, which
// here point into pooled memory reused after Push; and they read fields of
// the other kind as zero instead of refusing them, and do not reduce
// schemas above 8.

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
