package tsdbstore

import (
	"context"
	"math"
	"testing"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// Replay detection must compare floats bitwise: with == a NaN, and so
// every stale marker, would never equal itself, and a replayed stale
// marker would become a client error and be skipped.

var (
	staleNaN = math.Float64frombits(value.StaleNaN)
	// otherNaN is a NaN that is not a stale marker.
	otherNaN = math.NaN()
)

// staleFloatHistogram is the float histogram stale marker: a histogram
// whose sum is StaleNaN.
func staleFloatHistogram() *histogram.FloatHistogram {
	return &histogram.FloatHistogram{Sum: staleNaN}
}

func TestSameHistogramIsBitwise(t *testing.T) {
	nanSum := &histogram.FloatHistogram{Sum: otherNaN}
	negZero := &histogram.FloatHistogram{Sum: math.Copysign(0, -1)}
	for _, tc := range []struct {
		name string
		a, b *histogram.FloatHistogram
		want bool
	}{
		{"stale marker equals itself", staleFloatHistogram(), staleFloatHistogram(), true},
		{"NaN sum equals itself", nanSum, nanSum.Copy(), true},
		{"stale marker is not another NaN", staleFloatHistogram(), nanSum, false},
		{"-0 is not +0", negZero, &histogram.FloatHistogram{Sum: 0}, false},
		{"NaN count equals itself", &histogram.FloatHistogram{Count: otherNaN}, &histogram.FloatHistogram{Count: otherNaN}, true},
		{"NaN zero count equals itself", &histogram.FloatHistogram{ZeroCount: otherNaN}, &histogram.FloatHistogram{ZeroCount: otherNaN}, true},
	} {
		if got := sameHistogram(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: sameHistogram = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestStoredEqualsIsBitwise compares stored chunk samples with request
// samples, as findReplays does.
func TestStoredEqualsIsBitwise(t *testing.T) {
	xor := chunkenc.NewXORChunk()
	app, err := xor.Appender()
	if err != nil {
		t.Fatal(err)
	}
	stored := []float64{staleNaN, otherNaN, math.Copysign(0, -1), 1}
	for i, v := range stored {
		app.Append(0, int64(i), v)
	}
	for _, tc := range []struct {
		name string
		t    int64
		v    float64
		want bool
	}{
		{"stale marker", 0, staleNaN, true},
		{"stale marker vs NaN", 0, otherNaN, false},
		{"NaN", 1, otherNaN, true},
		{"NaN vs stale marker", 1, staleNaN, false},
		{"-0", 2, math.Copysign(0, -1), true},
		{"-0 vs +0", 2, 0, false},
		{"plain value", 3, 1, true},
	} {
		it := xor.Iterator(nil)
		vt := it.Seek(tc.t)
		if got := storedEquals(it, vt, point{t: tc.t, v: tc.v}); got != tc.want {
			t.Errorf("%s: storedEquals = %v, want %v", tc.name, got, tc.want)
		}
	}

	fhc := chunkenc.NewFloatHistogramChunk()
	fapp, err := fhc.Appender()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := fapp.AppendFloatHistogram(nil, 0, 0, staleFloatHistogram(), true); err != nil {
		t.Fatal(err)
	}
	it := fhc.Iterator(nil)
	vt := it.Seek(0)
	if !storedEquals(it, vt, point{fh: staleFloatHistogram()}) {
		t.Error("a stored float histogram stale marker does not equal itself")
	}
	it = fhc.Iterator(nil)
	vt = it.Seek(0)
	if storedEquals(it, vt, point{fh: &histogram.FloatHistogram{Sum: otherNaN}}) {
		t.Error("a stored float histogram stale marker equals a NaN sum")
	}
}

func TestPointIdenticalIsBitwise(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b point
		want bool
	}{
		{"stale marker", point{v: staleNaN}, point{v: staleNaN}, true},
		{"NaN", point{v: otherNaN}, point{v: otherNaN}, true},
		{"stale marker vs NaN", point{v: staleNaN}, point{v: otherNaN}, false},
		{"-0 vs +0", point{v: math.Copysign(0, -1)}, point{v: 0}, false},
		{"float histogram stale marker", point{fh: staleFloatHistogram()}, point{fh: staleFloatHistogram()}, true},
		{"float histogram stale marker vs NaN sum", point{fh: staleFloatHistogram()}, point{fh: &histogram.FloatHistogram{Sum: otherNaN}}, false},
	} {
		if got := tc.a.identical(tc.b); got != tc.want {
			t.Errorf("%s: identical = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestReplayedStaleMarkerIsAccepted is the end-to-end case: a stale marker
// re-read from Kafka after newer samples were stored is a replay, OK.
func TestReplayedStaleMarkerIsAccepted(t *testing.T) {
	s := newTestStore(t, nil)
	stale := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), float64(base), staleNaN)}}
	mustPush(t, s, "t", stale)
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), float64(base+1000), 1)}})
	res, err := s.Push(context.Background(), "t", stale)
	if err != nil || res.Accepted != 1 {
		t.Fatalf("replayed stale marker: %+v, %v", res, err)
	}
}
