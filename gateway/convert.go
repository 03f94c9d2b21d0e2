package gateway

import (
	"fmt"

	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// fromV2 converts a remote-write 2.0 request to the 1.0 request Ferry's
// records carry. Label references are resolved against the symbols table;
// samples, native histograms and exemplars are kept; each series' metadata
// becomes one 1.0 MetricMetadata per metric family (the first one seen
// wins). What 1.0 has no field for is dropped: start (created) timestamps,
// and metadata of series without a metric name.
//
// metadata is how many series have metadata (v2Counts.metadata): the
// families' map and array are sized to it, so that they never grow.
func fromV2(req *writev2.Request, metadata int) (*prompb.WriteRequest, error) {
	out := &prompb.WriteRequest{Timeseries: make([]prompb.TimeSeries, 0, len(req.Timeseries))}
	if metadata > 0 {
		out.Metadata = make([]prompb.MetricMetadata, 0, metadata)
	}
	families := make(map[string]bool, metadata)
	for i := range req.Timeseries {
		in := &req.Timeseries[i]
		ls, err := resolveLabels(in.LabelsRefs, req.Symbols)
		if err != nil {
			return nil, fmt.Errorf("timeseries %d: %w", i, err)
		}
		ts := prompb.TimeSeries{Labels: ls}
		if len(in.Samples) > 0 {
			ts.Samples = make([]prompb.Sample, len(in.Samples))
			for j, s := range in.Samples {
				ts.Samples[j] = prompb.Sample{Value: s.Value, Timestamp: s.Timestamp}
			}
		}
		for j := range in.Histograms {
			ts.Histograms = append(ts.Histograms, histogramFromV2(&in.Histograms[j]))
		}
		for j, e := range in.Exemplars {
			els, err := resolveLabels(e.LabelsRefs, req.Symbols)
			if err != nil {
				return nil, fmt.Errorf("timeseries %d exemplar %d: %w", i, j, err)
			}
			ts.Exemplars = append(ts.Exemplars, prompb.Exemplar{Labels: els, Value: e.Value, Timestamp: e.Timestamp})
		}
		md, err := metadataFromV2(in.Metadata, ls, req.Symbols)
		if err != nil {
			return nil, fmt.Errorf("timeseries %d metadata: %w", i, err)
		}
		if md != nil && !families[md.MetricFamilyName] {
			families[md.MetricFamilyName] = true
			out.Metadata = append(out.Metadata, *md)
		}
		out.Timeseries = append(out.Timeseries, ts)
	}
	return out, nil
}

// resolveLabels turns name/value reference pairs into labels.
func resolveLabels(refs []uint32, symbols []string) ([]prompb.Label, error) {
	if len(refs)%2 != 0 {
		return nil, fmt.Errorf("odd number of label references (%d)", len(refs))
	}
	ls := make([]prompb.Label, 0, len(refs)/2)
	for i := 0; i < len(refs); i += 2 {
		name, err := symbol(refs[i], symbols)
		if err != nil {
			return nil, err
		}
		value, err := symbol(refs[i+1], symbols)
		if err != nil {
			return nil, err
		}
		ls = append(ls, prompb.Label{Name: name, Value: value})
	}
	return ls, nil
}

func symbol(ref uint32, symbols []string) (string, error) {
	if int64(ref) >= int64(len(symbols)) {
		return "", fmt.Errorf("symbol reference %d outside the symbols table of %d entries", ref, len(symbols))
	}
	return symbols[ref], nil
}

// metadataFromV2 returns the 1.0 metadata of a series, or nil when it has
// none or no metric name to file it under.
func metadataFromV2(md writev2.Metadata, ls []prompb.Label, symbols []string) (*prompb.MetricMetadata, error) {
	if md.Type == writev2.Metadata_METRIC_TYPE_UNSPECIFIED && md.HelpRef == 0 && md.UnitRef == 0 {
		return nil, nil
	}
	help, err := symbol(md.HelpRef, symbols)
	if err != nil {
		return nil, err
	}
	unit, err := symbol(md.UnitRef, symbols)
	if err != nil {
		return nil, err
	}
	for _, l := range ls {
		if l.Name == "__name__" {
			// The two enums number the same types alike.
			return &prompb.MetricMetadata{Type: prompb.MetricMetadata_MetricType(md.Type), MetricFamilyName: l.Value, Help: help, Unit: unit}, nil
		}
	}
	return nil, nil
}

// histogramFromV2 copies a native histogram; the two versions' messages
// have the same fields except 2.0's start timestamp.
func histogramFromV2(h *writev2.Histogram) prompb.Histogram {
	out := prompb.Histogram{
		Sum:            h.Sum,
		Schema:         h.Schema,
		ZeroThreshold:  h.ZeroThreshold,
		NegativeSpans:  spansFromV2(h.NegativeSpans),
		NegativeDeltas: h.NegativeDeltas,
		NegativeCounts: h.NegativeCounts,
		PositiveSpans:  spansFromV2(h.PositiveSpans),
		PositiveDeltas: h.PositiveDeltas,
		PositiveCounts: h.PositiveCounts,
		ResetHint:      prompb.Histogram_ResetHint(h.ResetHint),
		Timestamp:      h.Timestamp,
		CustomValues:   h.CustomValues,
	}
	switch c := h.Count.(type) {
	case *writev2.Histogram_CountInt:
		out.Count = &prompb.Histogram_CountInt{CountInt: c.CountInt}
	case *writev2.Histogram_CountFloat:
		out.Count = &prompb.Histogram_CountFloat{CountFloat: c.CountFloat}
	}
	switch z := h.ZeroCount.(type) {
	case *writev2.Histogram_ZeroCountInt:
		out.ZeroCount = &prompb.Histogram_ZeroCountInt{ZeroCountInt: z.ZeroCountInt}
	case *writev2.Histogram_ZeroCountFloat:
		out.ZeroCount = &prompb.Histogram_ZeroCountFloat{ZeroCountFloat: z.ZeroCountFloat}
	}
	return out
}

func spansFromV2(in []writev2.BucketSpan) []prompb.BucketSpan {
	if in == nil {
		return nil
	}
	out := make([]prompb.BucketSpan, len(in))
	for i, s := range in {
		out[i] = prompb.BucketSpan{Offset: s.Offset, Length: s.Length}
	}
	return out
}
