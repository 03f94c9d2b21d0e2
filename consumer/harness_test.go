package consumer

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/internal/poll"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
	"github.com/ferrylabs/ferry/pusher/pushertest"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }

// testShape is the demo payload: series 0's value at step s is s, so a
// backend can tell which record it was given.
var testShape = loadgen.Shape{Series: 3, StartMs: 1_700_000_000_000, StepMs: 1000}

// testLogger logs to stderr when FERRY_TEST_LOGS is set, else discards.
func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("FERRY_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// recorder is a backend that remembers, per tenant, the steps it applied
// in the order it applied them.
type recorder struct {
	mu    sync.Mutex
	steps map[string][]int
	// fail, when set, decides the outcome of a push before it is recorded.
	fail func(tenant string, step int) error
}

func newRecorder() *recorder { return &recorder{steps: map[string][]int{}} }

func (r *recorder) backend() pushertest.BackendFunc {
	return pushertest.BackendFunc{PushFunc: func(_ context.Context, tenant string, req *prompb.WriteRequest) (backend.Result, error) {
		step := int(req.Timeseries[0].Samples[0].Value)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.fail != nil {
			if err := r.fail(tenant, step); err != nil {
				return backend.Result{}, err
			}
		}
		r.steps[tenant] = append(r.steps[tenant], step)
		return backend.Result{Accepted: backend.Count(req)}, nil
	}}
}

// recorderFailing returns a recorder whose pushes of tenant fail with a
// server error until setFail(nil).
func recorderFailing(tenant string) *recorder {
	r := newRecorder()
	r.fail = func(t string, _ int) error {
		if t == tenant {
			return errors.New(tenant + "'s storage is failing")
		}
		return nil
	}
	return r
}

func (r *recorder) setFail(f func(tenant string, step int) error) {
	r.mu.Lock()
	r.fail = f
	r.mu.Unlock()
}

// total returns the number of requests applied.
func (r *recorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.steps {
		n += len(s)
	}
	return n
}

// snapshot returns a copy of the applied steps.
func (r *recorder) snapshot() map[string][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string][]int, len(r.steps))
	for k, v := range r.steps {
		out[k] = append([]int(nil), v...)
	}
	return out
}

// startPusher serves b on a loopback listener until the test ends.
func startPusher(t testing.TB, b backend.Backend) string {
	t.Helper()
	return startPusherAt(t, "127.0.0.1:0", b)
}

func startPusherAt(t testing.TB, addr string, b backend.Backend) string {
	t.Helper()
	return pushertest.Serve(t, addr, b, testLogger(t))
}

// startGatedPusher serves a backend that holds every push until release
// is called, then notes the step of each (series 0's value, see
// testShape) in the order applied; steps returns a copy of them. Release
// may be called more than once, and is at the end of the test at the
// latest.
func startGatedPusher(t testing.TB) (addr string, release func(), steps func() []int) {
	t.Helper()
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	var mu sync.Mutex
	var applied []int
	addr = startPusher(t, pushertest.BackendFunc{PushFunc: func(_ context.Context, _ string, req *prompb.WriteRequest) (backend.Result, error) {
		<-gate
		mu.Lock()
		applied = append(applied, int(req.Timeseries[0].Samples[0].Value))
		mu.Unlock()
		return backend.Result{Accepted: backend.Count(req)}, nil
	}})
	t.Cleanup(release)
	steps = func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(applied)
	}
	return addr, release, steps
}

// gatedBacklog produces records to a fresh one-partition topic in
// batches of 20 and returns a configuration that reads it from the start
// into a gated pusher (startGatedPusher), ten requests in flight and a
// fetch of at most 1 KiB (one batch): a consumer started on it fills its
// window and stays behind the gate, its fetches going no further, until
// release.
func gatedBacklog(t testing.TB, b *kafkatest.Broker, records int) (topic string, cfg Config, release func(), steps func() []int) {
	t.Helper()
	topic = b.CreateTopic(t, 1)
	cl := manualClient(t, b)
	for first := 0; first < records; first += 20 {
		produce(t, cl, topic, 1, 1, first, 20)
	}
	addr, release, steps := startGatedPusher(t)
	cfg = testConfig(b.Addrs(), topic, "0", addr)
	cfg.ConsumeFromPosition = PositionStart
	cfg.MaxInflightRequests = 10
	cfg.FetchMaxBytes = 1024
	return topic, cfg, release, steps
}

// testConfig returns a consumer configuration with short intervals.
func testConfig(brokers []string, topic string, partitions, pusherAddr string) Config {
	var cfg Config
	cfg.RegisterFlags(flag.NewFlagSet("", flag.PanicOnError))
	cfg.KafkaAddress = brokers[0]
	cfg.Topic = topic
	cfg.ConsumerGroup = "ferry-" + topic
	cfg.Partitions = partitions
	cfg.PusherAddress = pusherAddr
	cfg.CommitInterval = 100 * time.Millisecond
	cfg.BackoffMin = 10 * time.Millisecond
	cfg.BackoffMax = 200 * time.Millisecond
	cfg.ShutdownTimeout = 10 * time.Second
	return cfg
}

// runningConsumer is a consumer running in the background.
type runningConsumer struct {
	*Consumer
	cancel context.CancelFunc
	done   chan error
}

// startConsumer runs a consumer until stop or the end of the test.
func startConsumer(t testing.TB, cfg Config) *runningConsumer {
	t.Helper()
	return startConsumerLogging(t, cfg, testLogger(t))
}

// startConsumerLogging is startConsumer logging to logger.
func startConsumerLogging(t testing.TB, cfg Config, logger *slog.Logger) *runningConsumer {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	c, err := New(cfg, logger, prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("new consumer: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rc := &runningConsumer{Consumer: c, cancel: cancel, done: make(chan error, 1)}
	go func() { rc.done <- c.Run(ctx) }()
	t.Cleanup(func() { rc.stop(t) })
	return rc
}

// stop stops the consumer gracefully and waits for Run to return.
func (rc *runningConsumer) stop(t testing.TB) {
	t.Helper()
	rc.cancel()
	select {
	case err, ok := <-rc.done:
		if ok && err != nil {
			t.Errorf("consumer run: %v", err)
		}
		if ok {
			close(rc.done)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("consumer did not stop within 30s")
	}
}

// produce writes perTenant records for each tenant, tenant i to partition
// i % partitions, with steps from first on, and waits for all of them.
func produce(t testing.TB, cl *kgo.Client, topic string, tenants, partitions, first, perTenant int) {
	t.Helper()
	var recs []*kgo.Record
	for step := first; step < first+perTenant; step++ {
		for i := range tenants {
			tenant := loadgen.Tenant(i)
			recs = append(recs, &kgo.Record{
				Topic:     topic,
				Partition: int32(i % partitions),
				Key:       []byte(tenant),
				Value:     testShape.Marshal(tenant, step),
			})
		}
	}
	produceRecords(t, cl, recs...)
}

func produceRecords(t testing.TB, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// manualClient returns a producer that honours Record.Partition.
func manualClient(t testing.TB, b *kafkatest.Broker) *kgo.Client {
	return b.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
}

// waitFor polls cond every 20ms until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, timeout, 20*time.Millisecond, what, cond)
}

// waitCommitted waits until the group committed every partition's end.
func waitCommitted(t testing.TB, b *kafkatest.Broker, group, topic string, timeout time.Duration) {
	t.Helper()
	ends := b.EndOffsets(t, topic)
	var got map[int32]int64
	waitFor(t, timeout, fmt.Sprintf("commits to reach the end offsets %v", ends), func() bool {
		got = b.CommittedOffsets(t, group, topic)
		for p, end := range ends {
			if got[p] != end {
				return false
			}
		}
		return true
	})
}

// partitionList renders 0..n-1 as a -kafka.partitions value.
func partitionList(n int) string {
	s := ""
	for i := range n {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprint(i)
	}
	return s
}
