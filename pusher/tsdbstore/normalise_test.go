package tsdbstore

import (
	"context"
	"slices"
	"testing"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// TestEmptyLabelValuesAreAbsent: Prometheus treats x="" as no label x, so
// {job="a"} and {job="a",x=""} are one series, and two different values of
// it at one timestamp are a conflict: one accepted, one rejected.
func TestEmptyLabelValuesAreAbsent(t *testing.T) {
	s := newTestStore(t, nil)
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		floats(lbls("__name__", "up", "job", "a"), float64(base), 1),
		floats(lbls("__name__", "up", "job", "a", "x", ""), float64(base), 2),
	}}
	res, err := s.Push(context.Background(), "t", req)
	ce := clientError(t, err)
	if res.Accepted != 1 || res.Rejected != 1 {
		t.Fatalf("result %+v (%v), want 1 accepted and 1 rejected", res, ce)
	}
	got := queryAll(t, s, "t")
	if len(got) != 1 {
		t.Fatalf("series %v, want only {job=\"a\"}", got)
	}
	if v := floatsOf(got[`{__name__="up", job="a"}`]); !slices.Equal(v, []float64{float64(base), 1}) {
		t.Fatalf("stored %v", got)
	}
	// The same value under either spelling is the same sample: accepted.
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		floats(lbls("__name__", "up", "job", "a", "x", ""), float64(base+1000), 3),
		floats(lbls("__name__", "up", "job", "a"), float64(base+1000), 3),
	}})
}

// TestPastGracePeriod: samples older than -limits.past-grace-period are
// client errors instead of 1970 blocks.
func TestPastGracePeriod(t *testing.T) {
	s := newTestStore(t, nil)
	res, err := s.Push(context.Background(), "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		floats(lbls("__name__", "x"), 1, 1, float64(base), 2),
	}})
	ce := clientError(t, err)
	if res.Accepted != 1 || res.Rejected != 1 || classify(ce.Cause).code != "too_far_in_past" {
		t.Fatalf("result %+v, %v", res, err)
	}
	// 0 disables the check.
	s0 := newTestStore(t, func(c *Config) { c.PastGracePeriod = 0 })
	mustPush(t, s0, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), 1, 1)}})
}
