package tsdbstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkSync measures a Sync at the bench's many-tenants shape: 1000
// open tenants, each with a fresh commit before every operation, and 4
// callers (the consumers of 4 partitions) calling Sync at once, with each
// -storage.sync-method; the callers ask for every tenant (scope=all), or
// each names its own quarter of them, as consumers do (scope=own). An
// operation is the time until all 4 Syncs returned; the pushes before it
// are not timed. It reports the fsyncs, syncfs calls and rounds per
// operation.
func BenchmarkSync(b *testing.B) {
	for _, method := range []string{SyncFsync, SyncSyncfs} {
		for _, scope := range []string{"all", "own"} {
			b.Run(fmt.Sprintf("method=%s/scope=%s", method, scope), func(b *testing.B) {
				if method == SyncSyncfs && syncfsSupported() != nil {
					b.Skip(syncfsSupported())
				}
				benchmarkSync(b, method, scope == "own")
			})
		}
	}
}

func benchmarkSync(b *testing.B, method string, own bool) {
	const tenants, callers = 1000, 4
	ctx := context.Background()
	s := newTestStore(b, func(c *Config) { c.SyncMethod = method })
	defer s.Close()
	var fsyncs, syncfs, syncfsNanos atomic.Int64
	s.durable.testFsync = func(path string) error {
		fsyncs.Add(1)
		return syncFile(path)
	}
	if method == SyncSyncfs {
		s.durable.testSyncfs = func() error {
			syncfs.Add(1)
			start := time.Now()
			defer func() { syncfsNanos.Add(int64(time.Since(start))) }()
			return syncfsFile(s.durable.syncfsRoot)
		}
	}
	names := make([]string, tenants)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%d", i)
	}
	ts := base
	push := func() {
		ts += 1000
		for _, name := range names {
			if _, err := s.Push(ctx, name, floatReq(ts, 1)); err != nil {
				b.Fatal(err)
			}
		}
	}
	push()
	if _, err := s.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	fsyncs.Store(0)
	syncfs.Store(0)
	syncfsNanos.Store(0)
	rounds := s.durable.rounds.started.Load()
	for b.Loop() {
		b.StopTimer()
		push()
		b.StartTimer()
		var wg sync.WaitGroup
		for i := range callers {
			var mine []string // nil: every tenant
			if own {
				for j := i; j < tenants; j += callers {
					mine = append(mine, names[j])
				}
			}
			wg.Go(func() {
				if _, err := s.SyncTenants(ctx, mine); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
	b.ReportMetric(float64(fsyncs.Load())/float64(b.N), "fsyncs/op")
	b.ReportMetric(float64(syncfs.Load())/float64(b.N), "syncfs/op")
	if method == SyncSyncfs {
		// The rest of an operation is the round's checks of every
		// tenant, and waiting for the round.
		b.ReportMetric(float64(syncfsNanos.Load())/1e6/float64(b.N), "syncfs-ms/op")
	}
	b.ReportMetric(float64(s.durable.rounds.started.Load()-rounds)/float64(b.N), "rounds/op")
}
