package tsdbstore

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// TestATenantsChunkWriteBufferIsSmall looks at tenants as they are after
// their first minute, when each TSDB has written its full head chunks to
// disk through a buffer it allocates then: with Prometheus' 4 MiB buffer
// that was 4 MiB of heap per tenant, eight times what the rest of a small
// tenant holds. Not parallel: it measures the process's heap.
func TestATenantsChunkWriteBufferIsSmall(t *testing.T) {
	separateOnly(t, "one buffer serves every tenant")
	const tenants = 20
	before := liveHeap()
	s := newTestStore(t, func(c *Config) {
		c.blockReloadInterval = time.Second
		c.MaxExemplars = DefaultMaxExemplars
	})
	fillTenants(t, s, tenants, 10, 200)
	waitChunksOnDisk(t, s, tenants)

	perTenant := float64(liveHeap()-before) / tenants
	t.Logf("%.0f KiB of heap per tenant with a %d KiB buffer", perTenant/1024, s.cfg.HeadChunksWriteBufferSize>>10)
	// About 0.6 MiB with the default 64 KiB buffer, 4.5 MiB with 4 MiB.
	if perTenant > 2<<20 {
		t.Errorf("each tenant holds %.1f MiB of heap once its head chunks are on disk, want under 2 MiB", perTenant/(1<<20))
	}
}

// fillTenants pushes steps samples 15 s apart to each of series series of
// tenants tenants, with a Sync every 10 steps as the consumers' commits
// do. The samples straddle a boundary of the head's chunk range (the
// block duration), where the head always cuts a chunk: at 200 samples
// it would not otherwise, and a test would pass or fail by the time of
// day.
func fillTenants(tb testing.TB, s *Store, tenants, series, steps int) {
	tb.Helper()
	ctx := context.Background()
	req := &prompb.WriteRequest{Timeseries: make([]prompb.TimeSeries, series)}
	for i := range req.Timeseries {
		req.Timeseries[i] = prompb.TimeSeries{
			Labels:  lbls("__name__", "bench_metric", "instance", fmt.Sprintf("host-%03d:9100", i), "job", "node"),
			Samples: []prompb.Sample{{}},
		}
	}
	chunkRange := s.cfg.BlockDuration.Milliseconds()
	start := base/chunkRange*chunkRange - int64(steps/2)*15_000
	for step := range steps {
		ts := start + int64(step)*15_000
		for i := range req.Timeseries {
			req.Timeseries[i].Samples[0] = prompb.Sample{Timestamp: ts, Value: float64(step)}
		}
		for t := range tenants {
			if _, err := s.Push(ctx, fmt.Sprintf("tenant-%d", t), req); err != nil {
				tb.Fatal(err)
			}
		}
		if step%10 == 9 {
			if _, err := s.Sync(ctx); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// waitChunksOnDisk waits until the head chunk files of the store's TSDBs,
// one per tenant or the shared one, hold data: they have written their full
// head chunks to disk.
func waitChunksOnDisk(tb testing.TB, s *Store, tenants int) {
	tb.Helper()
	root := s.cfg.Path
	if s.cfg.shared() {
		tenants = 1
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := 0
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || filepath.Base(filepath.Dir(path)) != "chunks_head" {
				return err
			}
			if info, err := d.Info(); err == nil && info.Size() > 0 {
				n++
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
		if n >= tenants {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d tenants wrote head chunks to disk within 30s", n, tenants)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
