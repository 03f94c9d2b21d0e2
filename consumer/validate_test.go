package consumer

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/proto/prompb"
)

func TestValidateWriteRequest(t *testing.T) {
	full, err := (&prompb.WriteRequest{
		Timeseries: []prompb.TimeSeries{{
			Labels:     []prompb.Label{{Name: "__name__", Value: "h"}},
			Samples:    []prompb.Sample{{Value: 1.5, Timestamp: 1}},
			Exemplars:  []prompb.Exemplar{{Labels: []prompb.Label{{Name: "trace_id", Value: "x"}}, Value: 1, Timestamp: 1}},
			Histograms: []prompb.Histogram{{Count: &prompb.Histogram_CountInt{CountInt: 3}, PositiveSpans: []prompb.BucketSpan{{Length: 1}}, PositiveDeltas: []int64{3}, Timestamp: 1}},
		}},
		Metadata: []prompb.MetricMetadata{{Type: prompb.MetricMetadata_METRIC_TYPE_GAUGE, MetricFamilyName: "h", Help: "help"}},
	}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	series := func(inner []byte) []byte {
		b := protowire.AppendTag(nil, 1, protowire.BytesType)
		return protowire.AppendBytes(b, inner)
	}
	labelWithVarintName := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5)
	sampleWithVarintValue := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5)
	for _, tc := range []struct {
		name  string
		value []byte
		ok    bool
	}{
		{"should accept a demo request", loadgen.Shape{Series: 5, StepMs: 1}.Marshal("t", 1), true},
		{"should accept histograms, exemplars and metadata", full, true},
		{"should accept an empty request", nil, true},
		{"should refuse a truncated request", full[:len(full)-3], false},
		{"should refuse a time series that is a varint", protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1), false},
		{"should refuse a label whose name is a varint", series(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), labelWithVarintName)), false},
		{"should refuse a sample whose value is a varint", series(protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), sampleWithVarintValue)), false},
		{"should refuse text", []byte("hello, world"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := validateWriteRequest(tc.value)
			if (err == nil) != tc.ok {
				t.Fatalf("validateWriteRequest = %v, want ok=%v", err, tc.ok)
			}
			var wr prompb.WriteRequest
			if decodes := wr.Unmarshal(tc.value) == nil; decodes != tc.ok {
				t.Fatalf("the generated decoder says ok=%v: the case is wrong", decodes)
			}
		})
	}
}
