package main

import (
	"context"
	"math"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// TestScrapeNative reads a native histogram the way the latency stage
// does, from two "consumers" and two scrapes, and checks the p99 against
// the exact one: within 2 ms at the consumer's resolution (schema 4), and
// inside its bucket when one consumer had to halve its resolution.
func TestScrapeNative(t *testing.T) {
	t.Run("schema 4", func(t *testing.T) { testScrapeNative(t, 1.05, 0.002, 1.05) })
	t.Run("schemas 4 and 3", func(t *testing.T) { testScrapeNative(t, 1.1, 0.004, 1.1) })
}

func testScrapeNative(t *testing.T, secondFactor, tolerance, widest float64) {
	serve := func(factor float64) (*httptest.Server, prometheus.Histogram) {
		reg := prometheus.NewRegistry()
		h := prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: latencyMetric, Help: "x", Buckets: prometheus.ExponentialBuckets(0.0005, 1.25, 54),
			NativeHistogramBucketFactor: factor,
		})
		reg.MustRegister(h)
		return httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})), h
	}
	fine, hf := serve(1.05) // schema 4
	defer fine.Close()
	coarse, hc := serve(secondFactor)
	defer coarse.Close()
	// Before the window: latencies the window must not count.
	for range 1000 {
		hf.Observe(5)
		hc.Observe(5)
	}
	snapshot := func() nativeHistogram {
		var sum nativeHistogram
		for _, s := range []*httptest.Server{fine, coarse} {
			n, ok, err := scrapeNative(context.Background(), strings.TrimPrefix(s.URL, "http://"), latencyMetric)
			if err != nil || !ok {
				t.Fatalf("scrape %s: ok %v, %v", s.URL, ok, err)
			}
			sum = sum.add(n)
		}
		return sum
	}
	before := snapshot()
	// The window: 1,000 latencies from 50 ms to 149.9 ms, evenly spread,
	// split between the two; the exact p99 is 149 ms.
	for i := range 1000 {
		h := hf
		if i%2 == 1 {
			h = hc
		}
		h.Observe(0.050 + float64(i)*0.0001)
	}
	w := snapshot().minus(before).histogram()
	if w.count != 1000 {
		t.Fatalf("count in the window = %v, want 1000", w.count)
	}
	v, lo, hi, above := w.quantile(0.99)
	if above || math.Abs(v-0.149) > tolerance || hi/lo > widest || lo > 0.149 || hi < 0.149 {
		t.Errorf("p99 = %.4f in (%.4f, %.4f], want 0.149 within %v, in a bucket at most %.2f times as high as low", v, lo, hi, tolerance, widest)
	}
	if v, _, _, _ := w.quantile(0.5); math.Abs(v-0.100) > 0.003 {
		t.Errorf("p50 = %.4f, want 0.100 within 3 ms", v)
	}
}

// TestScrapeNativeClassicOnly: a histogram without native buckets is not
// mistaken for an empty native one.
func TestScrapeNativeClassicOnly(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: latencyMetric, Help: "x"})
	reg.MustRegister(h)
	h.Observe(0.1)
	s := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer s.Close()
	if _, ok, err := scrapeNative(context.Background(), strings.TrimPrefix(s.URL, "http://"), latencyMetric); ok || err != nil {
		t.Fatalf("classic-only histogram: ok %v, %v", ok, err)
	}
}
