package tsdbstore

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/ferrylabs/ferry/internal/benchfixture"
	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// BenchmarkPushBatch is the TSDB's share of the bench's (4,100,100) shape:
// a tenant's requests of 100 series with one float sample each, in steady
// state (every series exists), applied by PushBatch in batches of 1 (Push)
// and of 6, about what the pusher's sequencer hands it at that shape. The
// labels are loadgen's (3 labels, what the bench sends) or a node
// exporter's (10 labels). The requests are built once and only their
// timestamps advance, so the figures are the store's alone; the timestamps
// advance by 1 ms a request, as in BenchmarkPush, so no compaction starts.
// Reported per sample: wall time, the process's CPU time (cpu-ns/op is
// per batch) and the bytes the WAL grew by.
func BenchmarkPushBatch(b *testing.B) {
	const series = 100
	for _, labels := range []string{"loadgen", "node"} {
		for _, batch := range []int{1, 6} {
			b.Run(fmt.Sprintf("labels=%s/batch=%d", labels, batch), func(b *testing.B) {
				benchPushBatch(b, labels, series, batch)
			})
		}
	}
}

func benchPushBatch(b *testing.B, labels string, series, batch int) {
	s := newTestStore(b, func(c *Config) { c.CreationGracePeriod = 0 })
	reqs := make([]*prompb.WriteRequest, batch)
	for i := range reqs {
		if labels == "node" {
			reqs[i] = benchfixture.NodeRequest(series, 0)
			continue
		}
		reqs[i] = loadgen.Shape{Series: series}.Request("tenant-1", 0)
	}
	out := make([]backend.Outcome, batch)
	ctx := context.Background()
	ts := base
	push := func() {
		for _, req := range reqs {
			ts++
			for i := range req.Timeseries {
				req.Timeseries[i].Samples[0] = prompb.Sample{Timestamp: ts, Value: benchValue(labels, i, ts)}
			}
		}
		if err := s.PushBatch(ctx, "tenant-1", reqs, out); err != nil {
			b.Fatal(err)
		}
		for _, o := range out {
			if o.Err != nil {
				b.Fatal(o.Err)
			}
		}
	}
	push() // creates the series: what follows is steady state
	wal := filepath.Join(s.cfg.Path, testDB("tenant-1"), "wal")
	wal0 := dirBytes(b, wal)
	b.ReportAllocs()
	cpu0 := benchfixture.CPUTime(b)
	b.ResetTimer()
	for b.Loop() {
		push()
	}
	samples := float64(b.N * batch * series)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/samples, "ns/sample")
	b.ReportMetric(float64(benchfixture.CPUTime(b)-cpu0)/samples, "cpu-ns/sample")
	b.ReportMetric(float64(dirBytes(b, wal)-wal0)/samples, "wal-B/sample")
}

// benchValue is series i's value at ts: loadgen's, what the bench sends,
// or for node labels a gauge-like float whose bits change in every byte,
// as a node exporter's do. The WAL's compression depends on them.
func benchValue(labels string, i int, ts int64) float64 {
	if labels == "node" {
		return float64(ts-base) * 1.37e-3 * float64(i+1)
	}
	return loadgen.Value(i, int(ts-base))
}

// dirBytes is the size of the files under dir.
func dirBytes(b *testing.B, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		n += info.Size()
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}
