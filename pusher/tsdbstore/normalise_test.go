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

// TestLabelOrderDoesNotMatter: a series is its set of labels, whatever
// order the request lists them in. Labels out of order, sorted except
// around an empty value, or unsorted only after an empty value all name
// the series the sorted spelling names, so their samples go to one series.
func TestLabelOrderDoesNotMatter(t *testing.T) {
	s := newTestStore(t, nil)
	spellings := [][]prompb.Label{
		lbls("__name__", "up", "instance", "h", "job", "a"),
		lbls("job", "a", "__name__", "up", "instance", "h"),
		lbls("__name__", "up", "x", "", "instance", "h", "job", "a"),
		lbls("__name__", "up", "job", "a", "", "", "instance", "h"),
		lbls("instance", "h", "__name__", "up", "job", "a"),
	}
	var want []float64
	for i, ls := range spellings {
		ts := float64(base + int64(i)*1000)
		mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(ls, ts, float64(i))}})
		want = append(want, ts, float64(i))
	}
	got := queryAll(t, s, "t")
	if len(got) != 1 {
		t.Fatalf("series %v, want only one", got)
	}
	if v := floatsOf(got[`{__name__="up", instance="h", job="a"}`]); !slices.Equal(v, want) {
		t.Fatalf("stored %v, want %v", got, want)
	}
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

// maxExemplarsOf reads the exemplar buffer size of the tenant's open TSDB
// from its own metrics, which the store keeps only with keepAll (set
// before the tenant opened).
func maxExemplarsOf(t *testing.T, s *Store, tenant string) float64 {
	t.Helper()
	return tsdbGauge(t, s, tenant, "prometheus_tsdb_exemplar_max_exemplars")
}

// tsdbGauge reads the gauge name of the tenant's open TSDB from its own
// metrics, which the store keeps only with keepAll (set before the tenant
// opened).
func tsdbGauge(t *testing.T, s *Store, tenant, name string) float64 {
	t.Helper()
	s.metrics.tsdb.mu.Lock()
	reg := s.metrics.tsdb.live[s.cfg.dbID(tenant)]
	s.metrics.tsdb.mu.Unlock()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

// TestNoExemplarBufferByDefault: the exemplar buffer is allocated whole
// when a tenant opens, so by default there is none (the probe's 1,000
// tenants cost 1 GB mostly in these buffers).
func TestNoExemplarBufferByDefault(t *testing.T) {
	if DefaultConfig().MaxExemplars != 0 {
		t.Fatalf("-storage.max-exemplars defaults to %d, want 0", DefaultConfig().MaxExemplars)
	}
	s := newTestStore(t, func(c *Config) { c.MaxExemplars = DefaultConfig().MaxExemplars })
	s.metrics.tsdb.keepAll = true
	mustPush(t, s, "t", floatReq(base, 1))
	if n := maxExemplarsOf(t, s, "t"); n != 0 {
		t.Fatalf("a tenant's exemplar buffer holds %v by default", n)
	}
	s2 := newTestStore(t, func(c *Config) { c.MaxExemplars = 1000 })
	s2.metrics.tsdb.keepAll = true
	mustPush(t, s2, "t", floatReq(base, 1))
	if n := maxExemplarsOf(t, s2, "t"); n != 1000 {
		t.Fatalf("with -storage.max-exemplars=1000 the buffer holds %v", n)
	}
}
