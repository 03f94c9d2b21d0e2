package tsdbstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// counterSum returns the sum of a counter family's series in reg, and
// whether the family was there.
func counterSum(t *testing.T, reg prometheus.Gatherer, name string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var n float64
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue() + float64(m.GetSummary().GetSampleCount())
			}
			return n, true
		}
	}
	return 0, false
}

// TestTSDBMetricsAreSummedOverTenantsAndSurviveAnIdleClose writes two
// tenants, one with an out-of-order sample, and expects the sums without
// a tenant label; closing the tenants must not make a counter go back, and
// a reopened tenant adds to them.
func TestTSDBMetricsAreSummedOverTenantsAndSurviveAnIdleClose(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	cfg := DefaultConfig()
	cfg.Path = t.TempDir()
	cfg.IdleTimeout = 50 * time.Millisecond
	s, err := New(cfg, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := float64(base)
	mustPush(t, s, "a", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), b, 1, b+1000, 2)}})
	mustPush(t, s, "b", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), b+5000, 1)}})
	if _, err := s.Push(context.Background(), "b", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), b, 7)}}); err == nil {
		t.Fatal("an out-of-order sample was accepted")
	}
	check := func(when string, appended float64) {
		t.Helper()
		if n, _ := counterSum(t, reg, "ferry_pusher_tsdb_head_samples_appended_total"); n != appended {
			t.Errorf("%s: %v samples appended, want %v", when, n, appended)
		}
		if n, _ := counterSum(t, reg, "ferry_pusher_tsdb_out_of_order_samples_total"); n != 1 {
			t.Errorf("%s: %v out-of-order samples, want 1", when, n)
		}
		if _, ok := counterSum(t, reg, "ferry_pusher_tsdb_compactions_total"); !ok {
			t.Errorf("%s: no ferry_pusher_tsdb_compactions_total", when)
		}
	}
	check("both open", 3)
	waitOpen(t, s, 0)
	check("both closed", 3)
	mustPush(t, s, "a", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), b+2000, 3)}})
	check("a reopened", 4)
	if got := s.metrics.tsdb.samplesAppended(); got["a"] != 3 || got["b"] != 1 {
		t.Errorf("samples appended per tenant %v, want a:3 b:1", got)
	}
}

func TestRateSamplerNeedsTwoLooksAtLeastAWindowApart(t *testing.T) {
	t.Parallel()
	var r rateSampler
	t0 := time.Unix(1_700_000_000, 0)
	steps := []struct {
		after time.Duration
		value float64
		want  float64 // -1: no rate yet
	}{
		{0, 10, -1},
		{time.Second, 20, -1},     // too soon after the first look
		{3 * time.Second, 40, 10}, // (40-10)/3s
		{4 * time.Second, 44, 34.0 / 4},
	}
	for _, s := range steps {
		got, ok := r.sample(t0.Add(s.after), map[string]float64{"a": s.value})["a"]
		if (s.want < 0 && ok) || (s.want >= 0 && got != s.want) {
			t.Errorf("at +%v: rate %v (%v), want %v", s.after, got, ok, s.want)
		}
	}
}

// TestATenantRegistryHoldsOnlyTheSummedMetrics opens a tenant and expects
// its TSDB's registry to hold the families Ferry sums and nothing else: a
// scrape gathers every open tenant's registry, and the TSDB's other
// metrics (about a hundred, some walking the head) made that cost a CPU
// second per scrape at 1,000 tenants.
func TestATenantRegistryHoldsOnlyTheSummedMetrics(t *testing.T) {
	separateOnly(t, "the TSDB's metrics are the shared TSDB's, not a tenant's")
	t.Parallel()
	s := newTestStore(t, nil)
	mustPush(t, s, "a", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), float64(base), 1)}})
	s.metrics.tsdb.mu.Lock()
	reg := s.metrics.tsdb.live["a"]
	s.metrics.tsdb.mu.Unlock()
	if reg == nil {
		t.Fatal("no registry for the open tenant")
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range mfs {
		if _, ok := aggregated[mf.GetName()]; !ok {
			t.Errorf("tenant registry holds %s, which is not summed", mf.GetName())
		}
		seen[mf.GetName()] = true
	}
	if !seen["prometheus_tsdb_head_samples_appended_total"] {
		t.Errorf("tenant registry lacks the samples appended; it holds %v", seen)
	}
}

// TestDescName reads the metric name from descriptors, quoted help and
// labels included; an invalid descriptor has an empty name.
func TestDescName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc *prometheus.Desc
		want string
		ok   bool
	}{
		{prometheus.NewDesc("prometheus_tsdb_head_series", "help", nil, nil), "prometheus_tsdb_head_series", true},
		{prometheus.NewDesc("with_labels", `a "quoted" help`, []string{"type"}, prometheus.Labels{"k": "v"}), "with_labels", true},
		{prometheus.NewInvalidDesc(errors.New("broken")), "", true},
	} {
		got, ok := descName(tc.desc)
		if got != tc.want || ok != tc.ok {
			t.Errorf("descName(%s) = %q, %v; want %q, %v", tc.desc, got, ok, tc.want, tc.ok)
		}
	}
}
