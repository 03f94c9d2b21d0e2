package consumer

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestLatencyHistogramResolution checks that the produce-to-ack histogram
// tells latencies a few ms apart near 100 ms: a p99 read from it must be
// good to a few ms, the size of the latency objective (issue 17). The
// classic buckets are 25% wide there; the native ones must be under 5%.
func TestLatencyHistogramResolution(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg, func() (int, int) { return 0, 0 }, func() bool { return true })
	// Five latencies 5% apart near 100 ms (about 5 ms apart).
	observed := []float64{0.0907, 0.0952, 0.1, 0.105, 0.1103}
	for _, v := range observed {
		m.latency.Observe(v)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "ferry_consumer_produce_to_ack_seconds" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		if h.Schema == nil || len(h.GetPositiveSpan()) == 0 {
			t.Fatal("no native buckets: a p99 is only known to within its 25%-wide classic bucket")
		}
		growth := math.Pow(2, math.Pow(2, -float64(h.GetSchema())))
		if growth-1 > 0.05 {
			t.Errorf("native buckets grow by %.1f%% from one to the next, want at most 5%%", 100*(growth-1))
		}
		// Buckets under 5% wide hold at most one of them each.
		var populated int
		var count, delta int64
		for _, d := range h.GetPositiveDelta() {
			delta += d
			if delta > 0 {
				populated++
				count += delta
			}
		}
		if count != int64(len(observed)) || populated != len(observed) {
			t.Errorf("%d observations 5%% apart fell into %d buckets (%d counted), want one each", len(observed), populated, count)
		}
		if len(h.GetBucket()) < 50 {
			t.Errorf("%d classic buckets, want them kept for text-format scrapers", len(h.GetBucket()))
		}
		return
	}
	t.Fatal("ferry_consumer_produce_to_ack_seconds not registered")
}
