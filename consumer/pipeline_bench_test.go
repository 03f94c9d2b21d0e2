package consumer

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/pusher/pushertest"
)

// BenchmarkConsumeSmallRecords runs one consumer over a partition of
// 10-series records of 250 tenants, target 3's records at (4,1000,10), into
// an in-process pusher that discards them, and reports the process's CPU
// (the pusher's included, the broker's not) and allocations per record.
// Every iteration reads the whole backlog again with a fresh group. Run it
// against the shared broker (FERRY_KAFKA_ADDRESS) with -benchtime=Nx.
func BenchmarkConsumeSmallRecords(b *testing.B) {
	benchmarkConsume(b, 250, 10)
}

// BenchmarkConsumeLargeRecords is BenchmarkConsumeSmallRecords with the
// replay stage's records: 100-series requests of 100 tenants, about 9 KB
// each and 9:1 under snappy, where what a fetch holds decompressed
// (-kafka.fetch-max-decompressed-bytes) is what matters.
func BenchmarkConsumeLargeRecords(b *testing.B) {
	benchmarkConsume(b, 100, 100)
}

// benchmarkConsume replays 20,000 records of tenants tenants and series
// series each through one consumer into a discarding pusher, per iteration.
func benchmarkConsume(b *testing.B, tenants, series int) {
	const records = 20_000
	br := kafkatest.Current(b)
	topic := br.CreateTopic(b, 1)
	sh := loadgen.Shape{Series: series, StartMs: 1_700_000_000_000, StepMs: 15_000}
	recs := make([]*kgo.Record, 0, records)
	for i := range records {
		tenant := loadgen.Tenant(i % tenants)
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(tenant), Value: sh.Marshal(tenant, i/tenants)})
	}
	produceRecords(b, br.Client(b), recs...)
	addr := startPusher(b, pushertest.BackendFunc{})

	var cpu time.Duration
	var mallocs uint64
	for i := 0; b.Loop(); i++ {
		cfg := testConfig(br.Addrs(), topic, "0", addr)
		cfg.ConsumerGroup = fmt.Sprintf("bench-%s-%d", topic, i)
		cfg.ConsumeFromPosition = PositionStart
		cpu0, m0 := processCPU(), mallocCount()
		rc := startConsumer(b, cfg)
		waitFor(b, time.Minute, "every record acknowledged", func() bool { return rc.Stats().Acks["ok"] >= records })
		cpu += processCPU() - cpu0
		mallocs += mallocCount() - m0
		b.StopTimer()
		rc.stop(b)
		b.StartTimer()
	}
	n := float64(b.N * records)
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/record")
	b.ReportMetric(float64(mallocs)/n, "allocs/record")
	b.ReportMetric(0, "ns/op")
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func mallocCount() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}
