package tsdbstore

import (
	"runtime"
	"testing"
	"time"
)

// BenchmarkTenantMemory measures what a tenant costs the pusher's heap at
// the bench's many-tenants shape, as it is after its first minute: each
// iteration fills a fresh store with 100 tenants of 10 series, 200 samples
// each 15 s apart (so head chunks are cut), with a Sync every 10 rounds as
// the consumer's commits do, waits until every tenant has written its full
// head chunks to disk (which a TSDB does once a minute, here every second),
// and reports the live heap per tenant after a GC, the store still open.
// Run it with -benchtime=1x; with FERRY_TEST_TENANCY=shared it measures
// the shared tenancy.
func BenchmarkTenantMemory(b *testing.B) {
	const tenants = 100
	var perTenant float64
	for b.Loop() {
		b.StopTimer()
		before := liveHeap()
		s := newTestStore(b, func(c *Config) {
			c.MaxExemplars = DefaultMaxExemplars
			c.blockReloadInterval = time.Second
		})
		b.StartTimer()
		fillTenants(b, s, tenants, 10, 200)
		b.StopTimer()
		waitChunksOnDisk(b, s, tenants)
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
