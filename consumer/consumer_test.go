package consumer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// checkSteps fails unless every tenant got exactly steps 0..n-1 in order,
// except the steps listed in skip.
func checkSteps(t *testing.T, got map[string][]int, tenants, n int, skip map[string][]int) {
	t.Helper()
	if len(got) != tenants {
		t.Errorf("got requests for %d tenants, want %d", len(got), tenants)
	}
	for tenant, steps := range got {
		var want []int
		for s := range n {
			if !slices.Contains(skip[tenant], s) {
				want = append(want, s)
			}
		}
		if !slices.Equal(steps, want) {
			t.Errorf("%s: pusher got steps %v, want %v", tenant, steps, want)
		}
	}
}

func TestDeliversEveryRecordOnceInTenantOrderAndCommitsToTheEnd(t *testing.T) {
	t.Parallel()
	const partitions, tenants, perTenant = 4, 20, 50
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, partitions)
	produce(t, manualClient(t, b), topic, tenants, partitions, 0, perTenant)

	rec := newRecorder()
	addr := startPusher(t, rec.backend())
	var consumers []*runningConsumer
	for p := range partitions {
		cfg := testConfig(b.Addrs(), topic, "", addr)
		cfg.InstanceID = fmt.Sprintf("consumer-%d", p)
		consumers = append(consumers, startConsumer(t, cfg))
	}
	waitFor(t, time.Minute, "every record pushed", func() bool { return rec.total() >= tenants*perTenant })
	waitCommitted(t, b, "ferry-"+topic, topic, 30*time.Second)
	for _, c := range consumers {
		c.stop(t)
	}
	checkSteps(t, rec.snapshot(), tenants, perTenant, nil)
	var ok int64
	for _, c := range consumers {
		ok += c.Stats().Acks["ok"]
	}
	if ok != tenants*perTenant {
		t.Errorf("consumers counted %d OK acks, want %d", ok, tenants*perTenant)
	}
}

func TestRestartResumesFromTheCommittedOffsetWithoutDuplicates(t *testing.T) {
	t.Parallel()
	const partitions, tenants = 2, 4
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, partitions)
	cl := manualClient(t, b)
	produce(t, cl, topic, tenants, partitions, 0, 30)

	rec := newRecorder()
	addr := startPusher(t, rec.backend())
	cfg := testConfig(b.Addrs(), topic, partitionList(partitions), addr)
	first := startConsumer(t, cfg)
	waitFor(t, time.Minute, "the first batch pushed", func() bool { return rec.total() == tenants*30 })
	first.stop(t)
	// The graceful stop committed the watermark, so the next run starts there.
	for p, end := range b.EndOffsets(t, topic) {
		if got := b.CommittedOffsets(t, cfg.ConsumerGroup, topic)[p]; got != end {
			t.Fatalf("after a graceful stop partition %d is committed at %d, want its end %d", p, got, end)
		}
	}

	produce(t, cl, topic, tenants, partitions, 30, 20)
	startConsumer(t, cfg)
	waitFor(t, time.Minute, "the second batch pushed", func() bool { return rec.total() >= tenants*50 })
	waitCommitted(t, b, cfg.ConsumerGroup, topic, 30*time.Second)
	checkSteps(t, rec.snapshot(), tenants, 50, nil)
}

func TestClientErrorIsCountedSkippedAndCommittedPast(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	produce(t, manualClient(t, b), topic, 2, 1, 0, 10)

	rec := newRecorder()
	rec.fail = func(tenant string, step int) error {
		if tenant == "tenant-0" && step == 3 {
			return backend.NewClientError("out-of-order sample for series {__name__=\"x\"}")
		}
		return nil
	}
	addr := startPusher(t, rec.backend())
	c := startConsumer(t, testConfig(b.Addrs(), topic, "0", addr))
	waitCommitted(t, b, "ferry-"+topic, topic, time.Minute)
	checkSteps(t, rec.snapshot(), 2, 10, map[string][]int{"tenant-0": {3}})
	if s := c.Stats(); s.Skipped != 1 || s.Acks["client_error"] != 1 {
		t.Errorf("skipped=%d client_error acks=%d, want 1 and 1", s.Skipped, s.Acks["client_error"])
	}
}

func TestServerErrorIsRetriedWithGrowingDelaysAndNeverCommittedPast(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	produce(t, manualClient(t, b), topic, 1, 1, 0, 6)

	var mu sync.Mutex
	var attempts []time.Time
	failing := true
	rec := newRecorder()
	rec.fail = func(_ string, step int) error {
		if step != 2 {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, time.Now())
		if failing {
			// A tiny hint, so the consumer's own schedule shows.
			return &backend.ServerError{Reason: "disk trouble", RetryAfter: time.Millisecond}
		}
		return nil
	}
	addr := startPusher(t, rec.backend())
	cfg := testConfig(b.Addrs(), topic, "0", addr)
	cfg.BackoffMin, cfg.BackoffMax = 20*time.Millisecond, 400*time.Millisecond
	c := startConsumer(t, cfg)

	waitFor(t, 30*time.Second, "6 failed attempts", func() bool { mu.Lock(); defer mu.Unlock(); return len(attempts) >= 6 })
	// Records 0 and 1 are done, record 2 fails: the commit must stop at 2.
	time.Sleep(3 * cfg.CommitInterval)
	if got := b.CommittedOffsets(t, cfg.ConsumerGroup, topic)[0]; got > 2 {
		t.Fatalf("committed offset %d moved past the failing record at offset 2", got)
	}
	if got := rec.snapshot()["tenant-0"]; !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("while step 2 fails the pusher applied %v, want [0 1]: a tenant's later records must wait", got)
	}
	mu.Lock()
	failing = false
	gaps := make([]time.Duration, 0, len(attempts))
	for i := 1; i < len(attempts); i++ {
		gaps = append(gaps, attempts[i].Sub(attempts[i-1]))
	}
	mu.Unlock()
	for i, g := range gaps {
		// Retry i waits at least half of min·2^i (jitter takes the rest).
		if floor := min(cfg.BackoffMin<<i, cfg.BackoffMax) / 2; g < floor {
			t.Errorf("retry %d came %s after the previous attempt, want at least %s (gaps %v)", i+1, g, floor, gaps)
		}
	}
	waitCommitted(t, b, cfg.ConsumerGroup, topic, 30*time.Second)
	checkSteps(t, rec.snapshot(), 1, 6, nil)
	if s := c.Stats(); s.Acks["server_error"] < 6 || s.Skipped != 0 {
		t.Errorf("server_error acks=%d skipped=%d, want >= 6 and 0", s.Acks["server_error"], s.Skipped)
	}
}

func TestRetriedTenantDoesNotStallOtherTenants(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	produce(t, manualClient(t, b), topic, 3, 1, 0, 40)

	rec := recorderFailing("tenant-0")
	addr := startPusher(t, rec.backend())
	cfg := testConfig(b.Addrs(), topic, "0", addr)
	startConsumer(t, cfg)
	waitFor(t, 30*time.Second, "the healthy tenants pushed", func() bool { return rec.total() == 2*40 })
	time.Sleep(3 * cfg.CommitInterval)
	// tenant-0's first record is offset 0, so nothing may be committed.
	if got, ok := b.CommittedOffsets(t, cfg.ConsumerGroup, topic)[0]; ok && got > 0 {
		t.Fatalf("committed offset %d although offset 0 was never acknowledged", got)
	}
	rec.setFail(nil)
	waitCommitted(t, b, cfg.ConsumerGroup, topic, 30*time.Second)
	checkSteps(t, rec.snapshot(), 3, 40, nil)
}

func TestFetchingPausesWhenTooFarAheadOfTheWatermark(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	produce(t, manualClient(t, b), topic, 2, 1, 0, 50) // offsets alternate tenant-0, tenant-1

	rec := newRecorder()
	rec.fail = func(tenant string, _ int) error {
		if tenant == "tenant-0" {
			return errors.New("tenant-0 is failing")
		}
		return nil
	}
	addr := startPusher(t, rec.backend())
	cfg := testConfig(b.Addrs(), topic, "0", addr)
	cfg.MaxUncommitted = 10
	startConsumer(t, cfg)
	// Offset 0 (tenant-0) fails, so at most 10 records are fetched: tenant-1
	// gets the 5 among them, not all 50 of its records.
	waitFor(t, 30*time.Second, "tenant-1's first records", func() bool { return rec.total() == 5 })
	time.Sleep(500 * time.Millisecond)
	if n := rec.total(); n != 5 {
		t.Fatalf("tenant-1 got %d records while the watermark was stuck at 0, want 5 (the bound of 10 uncommitted records)", n)
	}
	rec.setFail(nil)
	waitCommitted(t, b, cfg.ConsumerGroup, topic, 30*time.Second)
	checkSteps(t, rec.snapshot(), 2, 50, nil)
}

func TestUndecodableAndKeylessRecordsAreSkipped(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	produceRecords(t, manualClient(t, b),
		&kgo.Record{Topic: topic, Key: []byte("tenant-0"), Value: testShape.Marshal("tenant-0", 0)},
		&kgo.Record{Topic: topic, Key: []byte("tenant-0"), Value: []byte{0x0a, 0xff, 0xff, 0x01}}, // truncated field
		&kgo.Record{Topic: topic, Key: nil, Value: testShape.Marshal("tenant-0", 99)},
		&kgo.Record{Topic: topic, Key: []byte("tenant-0"), Value: make([]byte, 2048)}, // over the size limit below
		&kgo.Record{Topic: topic, Key: []byte("tenant-0"), Value: testShape.Marshal("tenant-0", 1)},
	)
	rec := newRecorder()
	addr := startPusher(t, rec.backend())
	cfg := testConfig(b.Addrs(), topic, "0", addr)
	cfg.MaxRequestBytes = 1024
	c := startConsumer(t, cfg)
	waitCommitted(t, b, cfg.ConsumerGroup, topic, time.Minute)
	checkSteps(t, rec.snapshot(), 1, 2, nil)
	if s := c.Stats(); s.Skipped != 3 {
		t.Errorf("skipped %d records, want 3 (undecodable, empty key, too large)", s.Skipped)
	}
}

func TestWaitsForAnUnreachablePusherThenCatchesUp(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	produce(t, manualClient(t, b), topic, 2, 1, 0, 10)

	addr := freeAddr(t)
	cfg := testConfig(b.Addrs(), topic, "0", addr)
	c := startConsumer(t, cfg)
	time.Sleep(time.Second)
	if err := c.Ready(); err == nil {
		t.Fatal("consumer is ready without a pusher")
	}
	if got := b.CommittedOffsets(t, cfg.ConsumerGroup, topic); len(got) != 0 {
		t.Fatalf("committed %v without a pusher", got)
	}
	rec := newRecorder()
	startPusherAt(t, addr, rec.backend())
	waitCommitted(t, b, cfg.ConsumerGroup, topic, time.Minute)
	checkSteps(t, rec.snapshot(), 2, 10, nil)
	if err := c.Ready(); err != nil {
		t.Errorf("not ready with a pusher: %v", err)
	}
}

func TestWaitsForAnUnreachableBrokerThenCatchesUp(t *testing.T) {
	t.Parallel()
	// A broker that appears later at a known address: only kfake can do
	// that within one test, whatever broker the package runs on.
	addr := freeAddr(t)
	_, portStr, _ := net.SplitHostPort(addr)
	var port int
	fmt.Sscan(portStr, &port)

	rec := newRecorder()
	pusherAddr := startPusher(t, rec.backend())
	cfg := testConfig([]string{addr}, "late", "0", pusherAddr)
	c := startConsumer(t, cfg)
	time.Sleep(time.Second)
	if err := c.Ready(); err == nil {
		t.Fatal("consumer is ready without a broker")
	}
	cluster, err := kfake.NewCluster(kfake.Ports(port), kfake.SeedTopics(1, "late"))
	if err != nil {
		t.Fatalf("start kfake on %s: %v", addr, err)
	}
	t.Cleanup(cluster.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce(t, cl, "late", 2, 1, 0, 10)
	waitFor(t, time.Minute, "every record pushed", func() bool { return rec.total() == 20 })
	checkSteps(t, rec.snapshot(), 2, 10, nil)
	c.stop(t) // before the cluster goes: the final commit needs it
}

func TestCommitWaitsForThePushersSync(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	produce(t, manualClient(t, b), topic, 1, 1, 0, 5)

	rec := newRecorder()
	backend := rec.backend()
	var mu sync.Mutex
	syncErr := errors.New("fsync failed")
	backend.SyncFunc = func(_ context.Context) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return 1, syncErr
	}
	addr := startPusher(t, backend)
	cfg := testConfig(b.Addrs(), topic, "0", addr)
	startConsumer(t, cfg)
	waitFor(t, 30*time.Second, "every record pushed", func() bool { return rec.total() == 5 })
	time.Sleep(5 * cfg.CommitInterval)
	if got := b.CommittedOffsets(t, cfg.ConsumerGroup, topic); len(got) != 0 {
		t.Fatalf("committed %v although every sync failed", got)
	}
	mu.Lock()
	syncErr = nil
	mu.Unlock()
	waitCommitted(t, b, cfg.ConsumerGroup, topic, 30*time.Second)
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
