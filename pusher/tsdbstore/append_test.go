package tsdbstore

import (
	"fmt"
	"math"
	"testing"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"

	"github.com/ferrylabs/ferry/proto/prompb"
)

func TestConvertHistogram(t *testing.T) {
	cases := []struct {
		name   string
		in     prompb.Histogram
		wantH  *histogram.Histogram
		wantFH *histogram.FloatHistogram
		bad    bool
	}{
		{
			name: "integer exponential",
			in: prompb.Histogram{
				Count: &prompb.Histogram_CountInt{CountInt: 9}, Sum: 12.5, Schema: 1, ZeroThreshold: 0.001,
				ZeroCount:     &prompb.Histogram_ZeroCountInt{ZeroCountInt: 1},
				PositiveSpans: []prompb.BucketSpan{{Offset: -1, Length: 2}, {Offset: 3, Length: 1}}, PositiveDeltas: []int64{2, 1, -2},
				NegativeSpans: []prompb.BucketSpan{{Offset: 0, Length: 1}}, NegativeDeltas: []int64{2},
				ResetHint: prompb.Histogram_RESET_HINT_NO, Timestamp: 1000,
			},
			wantH: &histogram.Histogram{
				CounterResetHint: histogram.NotCounterReset, Count: 9, Sum: 12.5, Schema: 1, ZeroThreshold: 0.001, ZeroCount: 1,
				PositiveSpans: []histogram.Span{{Offset: -1, Length: 2}, {Offset: 3, Length: 1}}, PositiveBuckets: []int64{2, 1, -2},
				NegativeSpans: []histogram.Span{{Offset: 0, Length: 1}}, NegativeBuckets: []int64{2},
			},
		},
		{
			name: "float exponential gauge",
			in: prompb.Histogram{
				Count: &prompb.Histogram_CountFloat{CountFloat: 4.5}, Sum: -3, Schema: -2, ZeroThreshold: 0.5,
				ZeroCount:     &prompb.Histogram_ZeroCountFloat{ZeroCountFloat: 0.5},
				PositiveSpans: []prompb.BucketSpan{{Offset: 0, Length: 2}}, PositiveCounts: []float64{1.5, 2.5},
				ResetHint: prompb.Histogram_RESET_HINT_GAUGE,
			},
			wantFH: &histogram.FloatHistogram{
				CounterResetHint: histogram.GaugeType, Count: 4.5, Sum: -3, Schema: -2, ZeroThreshold: 0.5, ZeroCount: 0.5,
				PositiveSpans: []histogram.Span{{Offset: 0, Length: 2}}, PositiveBuckets: []float64{1.5, 2.5},
			},
		},
		{
			name: "integer custom buckets",
			in: prompb.Histogram{
				Count: &prompb.Histogram_CountInt{CountInt: 4}, Sum: 7, Schema: histogram.CustomBucketsSchema,
				PositiveSpans: []prompb.BucketSpan{{Offset: 0, Length: 3}}, PositiveDeltas: []int64{1, 1, -1},
				CustomValues: []float64{1, 5, 10}, ResetHint: prompb.Histogram_RESET_HINT_YES,
			},
			wantH: &histogram.Histogram{
				CounterResetHint: histogram.CounterReset, Count: 4, Sum: 7, Schema: histogram.CustomBucketsSchema,
				PositiveSpans: []histogram.Span{{Offset: 0, Length: 3}}, PositiveBuckets: []int64{1, 1, -1},
				CustomValues: []float64{1, 5, 10},
			},
		},
		{
			name: "float custom buckets",
			in: prompb.Histogram{
				Count: &prompb.Histogram_CountFloat{CountFloat: 3}, Sum: 2, Schema: histogram.CustomBucketsSchema,
				PositiveSpans: []prompb.BucketSpan{{Offset: 1, Length: 1}}, PositiveCounts: []float64{3},
				CustomValues: []float64{0.5, 1},
			},
			wantFH: &histogram.FloatHistogram{
				Count: 3, Sum: 2, Schema: histogram.CustomBucketsSchema,
				PositiveSpans: []histogram.Span{{Offset: 1, Length: 1}}, PositiveBuckets: []float64{3},
				CustomValues: []float64{0.5, 1},
			},
		},
		{
			name: "reserved schema is reduced to 8",
			in: prompb.Histogram{
				Count: &prompb.Histogram_CountInt{CountInt: 2}, Schema: 10,
				PositiveSpans: []prompb.BucketSpan{{Offset: 0, Length: 2}}, PositiveDeltas: []int64{1, 0},
			},
			wantH: reduced(&histogram.Histogram{
				Count: 2, Schema: 10,
				PositiveSpans: []histogram.Span{{Offset: 0, Length: 2}}, PositiveBuckets: []int64{1, 0},
			}, 8),
		},
		{
			name:  "no count at all is an empty integer histogram",
			in:    prompb.Histogram{},
			wantH: &histogram.Histogram{},
		},
		{
			name:  "typed nil oneofs do not panic",
			in:    prompb.Histogram{Count: (*prompb.Histogram_CountInt)(nil), ZeroCount: (*prompb.Histogram_ZeroCountInt)(nil)},
			wantH: &histogram.Histogram{},
		},
		{
			name:   "typed nil float oneofs do not panic",
			in:     prompb.Histogram{Count: (*prompb.Histogram_CountFloat)(nil), ZeroCount: (*prompb.Histogram_ZeroCountFloat)(nil)},
			wantFH: &histogram.FloatHistogram{},
		},
		{name: "integer with float zero count", in: prompb.Histogram{Count: &prompb.Histogram_CountInt{CountInt: 1}, ZeroCount: &prompb.Histogram_ZeroCountFloat{ZeroCountFloat: 1}}, bad: true},
		{name: "float with integer zero count", in: prompb.Histogram{Count: &prompb.Histogram_CountFloat{CountFloat: 1}, ZeroCount: &prompb.Histogram_ZeroCountInt{ZeroCountInt: 1}}, bad: true},
		{name: "integer with float buckets", in: prompb.Histogram{Count: &prompb.Histogram_CountInt{CountInt: 1}, PositiveCounts: []float64{1}}, bad: true},
		{name: "float with integer buckets", in: prompb.Histogram{Count: &prompb.Histogram_CountFloat{CountFloat: 1}, NegativeDeltas: []int64{1}}, bad: true},
		{
			name: "reserved schema with inconsistent spans",
			in:   prompb.Histogram{Count: &prompb.Histogram_CountInt{CountInt: 1}, Schema: 12, PositiveSpans: []prompb.BucketSpan{{Length: 5}}, PositiveDeltas: []int64{1}},
			bad:  true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, fh, err := convertHistogram(&tc.in)
			if tc.bad {
				if err == nil {
					t.Fatalf("no error; got %v / %v", h, fh)
				}
				if c := classify(err); !c.client || c.code != "invalid_histogram" {
					t.Fatalf("error %v classified %+v, want an invalid_histogram client error", err, c)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.wantH != nil:
				if fh != nil || h == nil || !h.Equals(tc.wantH) || h.CounterResetHint != tc.wantH.CounterResetHint {
					t.Fatalf("got %v / %v, want integer %v", h, fh, tc.wantH)
				}
			default:
				if h != nil || fh == nil || !fh.Equals(tc.wantFH) || fh.CounterResetHint != tc.wantFH.CounterResetHint {
					t.Fatalf("got %v / %v, want float %v", h, fh, tc.wantFH)
				}
			}
		})
	}
}

// reduced returns h at the schema target, as Prometheus would store it.
func reduced(h *histogram.Histogram, target int32) *histogram.Histogram {
	if err := h.ReduceResolution(target); err != nil {
		panic(err)
	}
	return h
}

func TestConvertHistogramCopies(t *testing.T) {
	in := prompb.Histogram{
		Count: &prompb.Histogram_CountInt{CountInt: 2}, PositiveSpans: []prompb.BucketSpan{{Length: 1}},
		PositiveDeltas: []int64{2}, Schema: histogram.CustomBucketsSchema, CustomValues: []float64{1},
	}
	h, _, err := convertHistogram(&in)
	if err != nil {
		t.Fatal(err)
	}
	in.PositiveDeltas[0], in.CustomValues[0] = 99, 99
	if h.PositiveBuckets[0] != 2 || h.CustomValues[0] != 1 {
		t.Fatalf("the converted histogram shares the request's memory: %v", h)
	}
}

func TestSameHistogramIgnoresEmptyBuckets(t *testing.T) {
	a := &histogram.FloatHistogram{
		Count: 3, Sum: 1, Schema: 0,
		PositiveSpans: []histogram.Span{{Offset: 0, Length: 1}, {Offset: 2, Length: 1}}, PositiveBuckets: []float64{1, 2},
	}
	// The same histogram in a layout widened by a chunk merge.
	b := &histogram.FloatHistogram{
		Count: 3, Sum: 1, Schema: 0,
		PositiveSpans: []histogram.Span{{Offset: 0, Length: 4}}, PositiveBuckets: []float64{1, 0, 0, 2},
	}
	if !sameHistogram(a, b) || !sameHistogram(b, a) {
		t.Fatal("histograms differing in empty buckets only are not the same")
	}
	c := b.Copy()
	c.PositiveBuckets[2] = 1
	c.Count = 4
	if sameHistogram(a, c) {
		t.Fatal("histograms with different buckets are the same")
	}
	d := a.Copy()
	d.Sum = 2
	if sameHistogram(a, d) {
		t.Fatal("histograms with different sums are the same")
	}
}

func TestPointIdentical(t *testing.T) {
	stale := math.Float64frombits(value.StaleNaN)
	h := &histogram.Histogram{Count: 1, PositiveSpans: []histogram.Span{{Length: 1}}, PositiveBuckets: []int64{1}}
	cases := []struct {
		a, b point
		want bool
	}{
		{point{v: 1}, point{v: 1}, true},
		{point{v: 1}, point{v: 2}, false},
		{point{v: stale}, point{v: stale}, true},
		{point{v: math.NaN()}, point{v: stale}, false},
		{point{h: h}, point{h: h.Copy()}, true},
		{point{h: h}, point{v: 1}, false},
		{point{v: 0}, point{h: h}, false},
		{point{fh: h.ToFloat(nil)}, point{h: h}, false},
	}
	for i, tc := range cases {
		if got := tc.a.identical(tc.b); got != tc.want {
			t.Errorf("case %d: identical = %v, want %v", i, got, tc.want)
		}
	}
}

func TestReplayable(t *testing.T) {
	for _, err := range []error{storage.ErrOutOfOrderSample, storage.ErrOutOfBounds, storage.ErrTooOldSample, storage.ErrOutOfOrderExemplar} {
		if !replayable(fmt.Errorf("wrapped: %w", err)) {
			t.Errorf("%v is not replayable", err)
		}
	}
	for _, err := range []error{errInvalidHistogram, errSeriesLimit, errTooFarInFuture, storage.ErrDuplicateSampleForTimestamp} {
		if replayable(err) {
			t.Errorf("%v is replayable", err)
		}
	}
}
