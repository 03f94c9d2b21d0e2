package consumer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/loadgen"
)

// TestFetchSizerFollowsTheCompressionRatio feeds the sizer batches of
// known ratios: it asks for the decompressed bound over the ratio, never
// more than -kafka.fetch-max-bytes and never nothing.
func TestFetchSizerFollowsTheCompressionRatio(t *testing.T) {
	t.Parallel()
	var got int32
	s := newFetchSizer(4<<20, 8<<20, func(maxBytes, maxPartitionBytes int32) {
		if maxBytes != maxPartitionBytes {
			t.Errorf("fetch max bytes %d and partition max bytes %d differ", maxBytes, maxPartitionBytes)
		}
		got = maxBytes
	})
	if want := int32(8 << 20 / firstFetchRatio); s.initial() != want {
		t.Fatalf("first fetch asks %d bytes, want %d (the bound over the assumed ratio)", s.initial(), want)
	}
	batches := func(n, compressed, raw int) {
		for range n {
			s.OnFetchBatchRead(kgo.BrokerMetadata{}, "t", 0, kgo.FetchBatchMetrics{CompressedBytes: compressed, UncompressedBytes: raw})
		}
	}
	batches(200, 100_000, 900_000) // 9:1, snappy on remote-write requests
	if want := int32(8 << 20 / 9); got < want-1 || got > want+1 {
		t.Fatalf("at 9:1 a fetch asks %d bytes, want about %d", got, want)
	}
	batches(200, 100_000, 100_000) // incompressible: capped by -kafka.fetch-max-bytes
	if got != 4<<20 {
		t.Fatalf("at 1:1 a fetch asks %d bytes, want -kafka.fetch-max-bytes (%d)", got, 4<<20)
	}
	batches(200, 1, 1<<30) // absurdly compressible
	if got != 1 {
		t.Fatalf("at 2^30:1 a fetch asks %d bytes, want 1 (Kafka still returns one batch)", got)
	}
	batches(1, 0, 0) // a batch that failed to decode says nothing of the ratio
	if got != 1 {
		t.Fatalf("an empty batch changed the fetch size to %d", got)
	}
}

// batchBytes bounds the producer batches of produceCompressible: the least
// a fetch returns is one of them.
const batchBytes = 256 << 10

// produceCompressible produces 400 records of about 45 KB to a new topic of
// one partition, 18 MB that snappy compresses to about 2 MB, and returns
// the topic and the records' offsets.
func produceCompressible(t *testing.T, b *kafkatest.Broker) (string, []int64) {
	t.Helper()
	topic := b.CreateTopic(t, 1)
	shape := loadgen.Shape{Series: 500, StartMs: testShape.StartMs, StepMs: 1000}
	producer := b.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.SnappyCompression()), kgo.ProducerBatchMaxBytes(batchBytes))
	var recs []*kgo.Record
	var offsets []int64
	for step := range 400 {
		tenant := loadgen.Tenant(step % 10)
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(tenant), Value: shape.Marshal(tenant, step)})
		offsets = append(offsets, int64(step))
	}
	produceRecords(t, producer, recs...)
	return topic, offsets
}

// TestSizedClientAsksForTheDecompressedBoundOverTheRatio reads records
// that compress about 10:1 with a client of newSizedClient: once it has
// read them it asks for about the decompressed bound over that ratio, far
// more than its first fetch (which assumes 64:1) and far less than the
// compressed bound. The bounds on what a fetch holds, above and below,
// hold with a client that never resizes too; this one does not.
func TestSizedClientAsksForTheDecompressedBoundOverTheRatio(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic, offsets := produceCompressible(t, b)
	const most, decompressed = 4 << 20, 512 << 10
	cl, err := newSizedClient(most, decompressed, kgo.SeedBrokers(b.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for read := 0; read < len(offsets); {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		read += fs.NumRecords()
	}
	cl.Close() // no fetch runs from here on: the option may be read
	asked := cl.OptValue(kgo.FetchMaxBytes).(int32)
	first := int32(decompressed / firstFetchRatio)
	if asked < 4*first || asked > most/4 {
		t.Fatalf("after reading 10:1 batches the client asks for %d bytes a fetch, want about %d (first fetch %d, at most %d)",
			asked, decompressed/10, first, most)
	}
}

// TestBufferedFetchHoldsAboutMaxDecompressedBytes replays records that
// compress about 10:1 while the pusher holds every push, so the window is
// full and the client buffers the next fetch: that fetch holds about
// -kafka.fetch-max-decompressed-bytes once decompressed (plus a batch, the
// least Kafka returns), not -kafka.fetch-max-bytes of compressed batches
// decompressed.
func TestBufferedFetchHoldsAboutMaxDecompressedBytes(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic, _ := produceCompressible(t, b)

	h := &holdingBackend{release: make(chan struct{})}
	addr := startPusher(t, h.backend())
	cfg := testConfig(b.Addrs(), topic, "0", addr)
	cfg.MaxInflightRequests = 4
	cfg.FetchMaxDecompressed = 512 << 10
	c := startConsumer(t, cfg)

	waitFor(t, 30*time.Second, "the window full of held pushes", func() bool { held, _ := h.counts(); return held >= 4 })
	var most int64
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		most = max(most, c.kafka.BufferedFetchBytes())
		time.Sleep(10 * time.Millisecond)
	}
	bound := int64(cfg.FetchMaxDecompressed + batchBytes)
	if most == 0 {
		t.Fatal("the client buffered no fetch while the window was full: the test proves nothing")
	}
	if most > bound {
		t.Fatalf("the client buffered %d bytes of fetched records, want at most %d (-kafka.fetch-max-decompressed-bytes=%d plus a batch)",
			most, bound, cfg.FetchMaxDecompressed)
	}
	t.Logf("buffered at most %d bytes", most)
	close(h.release)
	waitCommitted(t, b, cfg.ConsumerGroup, topic, time.Minute)
}

// bufferedBytes is a kgo hook that follows the bytes of record values
// buffered in a client, fetched but not yet polled, and the most at once.
type bufferedBytes struct{ now, most atomic.Int64 }

func (b *bufferedBytes) OnFetchRecordBuffered(r *kgo.Record) {
	n := b.now.Add(int64(len(r.Value)))
	for m := b.most.Load(); n > m && !b.most.CompareAndSwap(m, n); m = b.most.Load() {
	}
}

func (b *bufferedBytes) OnFetchRecordUnbuffered(r *kgo.Record, _ bool) {
	b.now.Add(-int64(len(r.Value)))
}

// TestRefetchHoldsAboutHalfMaxDecompressedBytes re-reads records that
// compress about 10:1: each fetch of the read's client holds about half of
// -kafka.fetch-max-decompressed-bytes once decompressed (plus a batch),
// not half of -kafka.fetch-max-bytes of compressed batches decompressed.
func TestRefetchHoldsAboutHalfMaxDecompressedBytes(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic, offsets := produceCompressible(t, b)

	cfg := testConfig(b.Addrs(), topic, "0", "127.0.0.1:1")
	cfg.FetchMaxDecompressed = 512 << 10
	r := newTestRefetcher(t, cfg)
	var buffered bufferedBytes
	r.opts = append(r.opts, kgo.WithHooks(&buffered))
	values, missing := mustRead(t, r, 0, offsets)
	if len(values) != len(offsets) || len(missing) > 0 {
		t.Fatalf("read %d values, %d missing, want %d and none", len(values), len(missing), len(offsets))
	}
	bound := int64(cfg.FetchMaxDecompressed/2 + batchBytes)
	if most := buffered.most.Load(); most > bound {
		t.Fatalf("a re-read buffered %d bytes of fetched records, want at most %d (half of -kafka.fetch-max-decompressed-bytes=%d plus a batch)",
			most, bound, cfg.FetchMaxDecompressed)
	}
	t.Logf("buffered at most %d bytes", buffered.most.Load())
}
