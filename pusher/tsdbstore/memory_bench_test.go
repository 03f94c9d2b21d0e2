package tsdbstore

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// BenchmarkTenantMemory measures what a tenant costs the pusher's heap at
// the bench's many-tenants shape: each iteration fills a fresh store with
// 100 tenants of 10 series, 200 samples each 15 s apart (so head chunks are
// cut and written to the chunk files, as in a long run), with a Sync every
// 10 rounds as the consumer's commits do, and reports the live heap per
// tenant after a GC, the store still open. Run it with -benchtime=1x.
func BenchmarkTenantMemory(b *testing.B) {
	const tenants, series, steps = 100, 10, 200
	ctx := context.Background()
	req := &prompb.WriteRequest{Timeseries: make([]prompb.TimeSeries, series)}
	for i := range req.Timeseries {
		req.Timeseries[i] = prompb.TimeSeries{
			Labels:  lbls("__name__", "bench_metric", "instance", fmt.Sprintf("host-%03d:9100", i), "job", "node"),
			Samples: []prompb.Sample{{}},
		}
	}
	var perTenant float64
	for b.Loop() {
		b.StopTimer()
		before := liveHeap()
		start := base - steps*15_000
		s := newTestStore(b, func(c *Config) { c.MaxExemplars = DefaultMaxExemplars })
		b.StartTimer()
		for step := range steps {
			ts := start + int64(step)*15_000
			for i := range req.Timeseries {
				req.Timeseries[i].Samples[0] = prompb.Sample{Timestamp: ts, Value: float64(step)}
			}
			for t := range tenants {
				if _, err := s.Push(ctx, fmt.Sprintf("tenant-%d", t), req); err != nil {
					b.Fatal(err)
				}
			}
			if step%10 == 9 {
				if _, err := s.Sync(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StopTimer()
		perTenant = float64(liveHeap()-before) / tenants
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(perTenant, "heap-B/tenant")
}

// liveHeap is the heap in use after a full collection.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}
