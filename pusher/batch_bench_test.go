package pusher

import (
	"context"
	"fmt"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrylabs/ferry/internal/loadgen"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/pusher/tsdbstore"
)

// BenchmarkSequencedTSDB measures a tenant's sequenced requests through a
// stream's sequencer into the TSDB store, without the network: validation,
// the append, the commit (and its WAL write) and the answer. Each round
// queues 16 requests, what the consumer keeps in flight per tenant by
// default, and waits for their answers; batch=1 applies them one by one
// (a commit each), batch=16 as they queue up (-pusher.max-batch-requests).
// Reported per request: wall time (ns/req) and the process's CPU time
// (cpu-ns/req), which includes the TSDB's background goroutines.
func BenchmarkSequencedTSDB(b *testing.B) {
	const inflight = 16
	for _, series := range []int{10, 100} {
		for _, batch := range []int{1, inflight} {
			b.Run(fmt.Sprintf("series=%d/batch=%d", series, batch), func(b *testing.B) {
				benchSequencedTSDB(b, series, batch, inflight)
			})
		}
	}
}

func benchSequencedTSDB(b *testing.B, series, batch, inflight int) {
	cfg := benchConfig(b)
	cfg.MaxBatchRequests = batch
	scfg := tsdbstore.DefaultConfig()
	scfg.Path = b.TempDir()
	store, err := tsdbstore.New(scfg, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	s := NewServer(cfg, store, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	answers := make(chan *ferryv1.PushResponse, inflight)
	send := func(rs []received, as []answered) {
		for i, r := range rs {
			answers <- s.applier.settle(r.req, as[i])
		}
	}
	sq := newSequencer(ctx, s.applier.applyTenant, s.applier.unapplied, send, s.applier.batchRequests(), cfg.MaxBatchBytes)
	defer sq.wait()

	// Timestamps advance by 1ms per request, as in tsdbstore's
	// BenchmarkPush: however many iterations run, the head never spans
	// enough time to start a compaction.
	sh := loadgen.Shape{Series: series, StartMs: time.Now().Add(-time.Hour).UnixMilli(), StepMs: 1}
	reqs := make([]*ferryv1.PushRequest, inflight)
	for i := range reqs {
		reqs[i] = &ferryv1.PushRequest{Tenant: "tenant-1"}
	}
	step := 0
	cpu0 := cpuTime(b)
	b.ReportAllocs()
	for b.Loop() {
		for _, req := range reqs {
			step++
			req.RequestId, req.Sequence = uint64(step), uint64(step)
			req.WriteRequest = *sh.Request("tenant-1", step)
			sq.enqueue(received{req: req, size: req.WriteRequest.Size()})
		}
		for range inflight {
			if resp := <-answers; resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
				b.Fatalf("%s: %s", resp.Status, resp.Reason)
			}
		}
	}
	n := float64(b.N * inflight)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/req")
	b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/n, "cpu-ns/req")
	b.ReportMetric(float64(series)*n/b.Elapsed().Seconds(), "samples/s")
}

// cpuTime is the CPU time the process used so far, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
