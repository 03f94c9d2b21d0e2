package tsdbstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrylabs/ferry/internal/benchfixture"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// BenchmarkScrapeTenants is one scrape of the store's metrics with 1,000
// open tenants: what a Prometheus scraping the pusher (and the bench,
// which polls it) costs the pusher at the many-tenants shape.
func BenchmarkScrapeTenants(b *testing.B) {
	const tenants = 1000
	reg := prometheus.NewRegistry()
	cfg := DefaultConfig()
	cfg.Path = b.TempDir()
	cfg.IdleTimeout = 0
	s, err := New(cfg, nil, reg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x", "job", "bench"), float64(base), 1)}}
	for i := range tenants {
		if _, err := s.Push(context.Background(), fmt.Sprintf("tenant-%d", i), req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	start := benchfixture.CPUTime(b)
	b.ResetTimer()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
	benchfixture.ReportCPU(b, start)
}
