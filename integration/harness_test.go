// Package integration holds Ferry's end-to-end acceptance tests: records
// produced to a real Kafka broker (kfake with FERRY_KAFKA_FAKE=1) are read by
// consumers started through consumer/app, pushed over real gRPC on loopback
// to a pusher started through pusher/app (or, where a test must see every
// request the backend gets, a pusher assembled from the same pieces around a
// recording backend), stored in a TSDB under t.TempDir() and read back
// through the pusher's query API. Everything runs in the test process.
//
// Set FERRY_TEST_LOGS=1 to see the services' logs on stderr.
package integration

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	consumerapp "github.com/ferrylabs/ferry/consumer/app"
	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/internal/poll"
	"github.com/ferrylabs/ferry/proto/prompb"
	pusherapp "github.com/ferrylabs/ferry/pusher/app"
	"github.com/ferrylabs/ferry/pusher/backend"
	"github.com/ferrylabs/ferry/pusher/pushertest"
	"github.com/ferrylabs/ferry/pusher/queryapi"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }

// runTimeout bounds the life of every service a test starts: a hung test
// stops its services instead of waiting for the go test timeout.
const runTimeout = 3 * time.Minute

// stopTimeout is how long a graceful stop may take before the test fails.
const stopTimeout = 30 * time.Second

// testLogger logs to stderr when FERRY_TEST_LOGS is set, else discards.
func testLogger(t testing.TB, component string) *slog.Logger {
	if os.Getenv("FERRY_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).
			With("test", t.Name(), "component", component)
	}
	return slog.New(slog.DiscardHandler)
}

// recentStart is a loadgen start time in the recent past: an hour ago,
// truncated to the minute, so every sample of a test is older than now (the
// pusher refuses the future) and fits the TSDB head (2h blocks).
func recentStart() int64 {
	return time.Now().Add(-time.Hour).Truncate(time.Minute).UnixMilli()
}

// ---- pusher ----

// pusherProc is a pusher started with pusher/app and served in the
// background until stop or the end of the test.
type pusherProc struct {
	*pusherapp.Process
	storage string
	cancel  context.CancelFunc
	done    chan error
	once    sync.Once
	err     error
}

// pusherConfig is the pusher/app configuration of the tests: flag defaults,
// loopback listeners on free ports, the TSDB backend under storage.
func pusherConfig(t testing.TB, storage string) pusherapp.Config {
	t.Helper()
	var cfg pusherapp.Config
	cfg.RegisterFlags(flag.NewFlagSet("pusher", flag.PanicOnError))
	cfg.Pusher.GRPCListenAddress = "127.0.0.1:0"
	cfg.HTTPListenAddress = "127.0.0.1:0"
	cfg.Pusher.ShutdownTimeout = 5 * time.Second
	cfg.Backend = pusherapp.BackendTSDB
	cfg.TSDB.Path = storage
	if err := cfg.Validate(); err != nil {
		t.Fatalf("pusher config: %v", err)
	}
	return cfg
}

// startPusher starts a pusher through pusher/app.Start and runs it.
func startPusher(t testing.TB, cfg pusherapp.Config) *pusherProc {
	t.Helper()
	p, err := pusherapp.Start(cfg, testLogger(t, "pusher"))
	if err != nil {
		t.Fatalf("pusher start: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	pp := &pusherProc{Process: p, storage: cfg.TSDB.Path, cancel: cancel, done: make(chan error, 1)}
	go func() { pp.done <- p.Run(ctx) }()
	t.Cleanup(func() {
		if err := pp.stop(t); err != nil {
			t.Errorf("pusher run: %v", err)
		}
	})
	return pp
}

// stop stops the pusher gracefully (which closes its backend) and returns
// what Run returned.
func (pp *pusherProc) stop(t testing.TB) error {
	t.Helper()
	pp.once.Do(func() {
		pp.cancel()
		select {
		case pp.err = <-pp.done:
		case <-time.After(stopTimeout):
			pp.err = fmt.Errorf("pusher did not stop within %s", stopTimeout)
		}
	})
	return pp.err
}

// recorder is a backend.Backend that wraps another one and remembers, per
// tenant, the loadgen step of every request the inner backend applied, in
// the order it applied them. The step is read from the first sample's
// timestamp.
type recorder struct {
	inner backend.Backend
	shape loadgen.Shape

	mu    sync.Mutex
	steps map[string][]int
	n     int
}

func newRecorder(inner backend.Backend, shape loadgen.Shape) *recorder {
	return &recorder{inner: inner, shape: shape, steps: map[string][]int{}}
}

func (r *recorder) Push(ctx context.Context, tenant string, req *prompb.WriteRequest) (backend.Result, error) {
	res, err := r.inner.Push(ctx, tenant, req)
	if err != nil || len(req.Timeseries) == 0 || len(req.Timeseries[0].Samples) == 0 {
		return res, err
	}
	step := int((req.Timeseries[0].Samples[0].Timestamp - r.shape.StartMs) / r.shape.StepMs)
	r.mu.Lock()
	r.steps[tenant] = append(r.steps[tenant], step)
	r.n++
	r.mu.Unlock()
	return res, nil
}

func (r *recorder) Sync(ctx context.Context) (int, error) { return r.inner.Sync(ctx) }
func (r *recorder) Close() error                          { return r.inner.Close() }

// total returns the number of requests applied.
func (r *recorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
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

// startRecordingPusher serves backend through the same pieces pusher/app
// assembles (pusher.NewServer and pusher.Listen: the Pusher service, health
// and reflection on a loopback gRPC listener). pusher/app.Start opens its
// backend itself and offers no way to wrap it, hence this variant for the
// tests that must see every applied request.
func startRecordingPusher(t testing.TB, b backend.Backend) string {
	t.Helper()
	// Registered first, so it runs after the service has stopped.
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("close backend: %v", err)
		}
	})
	return pushertest.Serve(t, "127.0.0.1:0", b, testLogger(t, "pusher"))
}

// ---- consumers ----

// consumerProc is a consumer started with consumer/app and run in the
// background until stop or the end of the test.
type consumerProc struct {
	*consumerapp.Process
	id     string
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// consumerConfig is the consumer/app configuration of the tests: flag
// defaults with short intervals, reading the partition named by instanceID.
func consumerConfig(t testing.TB, b *kafkatest.Broker, topic, group, instanceID, pusherAddr string) consumerapp.Config {
	t.Helper()
	var cfg consumerapp.Config
	cfg.RegisterFlags(flag.NewFlagSet("consumer", flag.PanicOnError))
	cfg.Consumer.KafkaAddress = strings.Join(b.Addrs(), ",")
	cfg.Consumer.Topic = topic
	cfg.Consumer.ConsumerGroup = group
	cfg.Consumer.InstanceID = instanceID
	cfg.Consumer.PusherAddress = pusherAddr
	cfg.Consumer.CommitInterval = 100 * time.Millisecond
	cfg.Consumer.BackoffMin = 10 * time.Millisecond
	cfg.Consumer.BackoffMax = 200 * time.Millisecond
	cfg.Consumer.SyncTimeout = 10 * time.Second
	cfg.Consumer.ShutdownTimeout = 15 * time.Second
	cfg.HTTPListenAddress = "127.0.0.1:0"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("consumer config: %v", err)
	}
	return cfg
}

// startConsumer starts a consumer through consumer/app.Start and runs it.
func startConsumer(t testing.TB, cfg consumerapp.Config, logger *slog.Logger) *consumerProc {
	t.Helper()
	p, err := consumerapp.Start(cfg, logger)
	if err != nil {
		t.Fatalf("consumer %s start: %v", cfg.Consumer.InstanceID, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	cp := &consumerProc{Process: p, id: cfg.Consumer.InstanceID, cancel: cancel, done: make(chan error, 1)}
	go func() { cp.done <- p.Run(ctx) }()
	t.Cleanup(func() {
		if err := cp.stop(); err != nil {
			t.Errorf("consumer %s: %v", cp.id, err)
		}
	})
	return cp
}

// startConsumers starts consumer-0..n-1, one per partition.
func startConsumers(t testing.TB, b *kafkatest.Broker, topic, group, pusherAddr string, n int) []*consumerProc {
	t.Helper()
	out := make([]*consumerProc, n)
	for i := range n {
		id := "consumer-" + strconv.Itoa(i)
		out[i] = startConsumer(t, consumerConfig(t, b, topic, group, id, pusherAddr), testLogger(t, id))
	}
	return out
}

// stop stops the consumer gracefully (cancel its context) and returns what
// Run returned; nil is a clean stop with the final commit done.
func (cp *consumerProc) stop() error {
	cp.once.Do(func() {
		cp.cancel()
		select {
		case cp.err = <-cp.done:
		case <-time.After(stopTimeout):
			cp.err = fmt.Errorf("did not stop within %s", stopTimeout)
		}
	})
	return cp.err
}

// stopAll stops consumers gracefully and fails the test unless every Run
// returned nil.
func stopAll(t testing.TB, cs []*consumerProc) {
	t.Helper()
	for _, c := range cs {
		if err := c.stop(); err != nil {
			t.Errorf("consumer %s: Run returned %v, want nil after a graceful stop", c.id, err)
		}
	}
}

// ackTotals sums the consumers' acknowledgement counts by status.
func ackTotals(cs []*consumerProc) map[string]int64 {
	out := map[string]int64{}
	for _, c := range cs {
		for k, v := range c.Consumer.Stats().Acks {
			out[k] += v
		}
	}
	return out
}

// ---- Kafka ----

// manualClient returns a producer that honours Record.Partition.
func manualClient(t testing.TB, b *kafkatest.Broker) *kgo.Client {
	t.Helper()
	return b.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
}

// produceSteps produces the loadgen request of steps [first, first+n) for
// tenants 0..tenants-1, tenant i to partition i % partitions, step by step.
// It returns the number of records produced.
func produceSteps(t testing.TB, cl *kgo.Client, topic string, shape loadgen.Shape, tenants, partitions, first, n int) int {
	t.Helper()
	recs := make([]*kgo.Record, 0, tenants*n)
	for step := first; step < first+n; step++ {
		for i := range tenants {
			tenant := loadgen.Tenant(i)
			recs = append(recs, &kgo.Record{
				Topic:     topic,
				Partition: int32(i % partitions),
				Key:       []byte(tenant),
				Value:     shape.Marshal(tenant, step),
			})
		}
	}
	produceRecords(t, cl, recs...)
	return len(recs)
}

func produceRecords(t testing.TB, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce %d records: %v", len(recs), err)
	}
}

// waitFor polls cond every 20ms until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, timeout, 20*time.Millisecond, what, cond)
}

// waitCommittedToEnd waits until group's committed offset of every
// partition of topic equals the partition's end offset, as the broker
// reports both, and returns the end offsets.
func waitCommittedToEnd(t testing.TB, b *kafkatest.Broker, group, topic string, timeout time.Duration) map[int32]int64 {
	t.Helper()
	ends := b.EndOffsets(t, topic)
	var got map[int32]int64
	deadline := time.Now().Add(timeout)
	for {
		got = b.CommittedOffsets(t, group, topic)
		if offsetsEqual(got, ends) {
			return ends
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s: committed offsets %v, end offsets %v", timeout, got, ends)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func offsetsEqual(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for p, o := range b {
		if v, ok := a[p]; !ok || v != o {
			return false
		}
	}
	return true
}

// ---- query API ----

// promResponse is the Prometheus HTTP API envelope of an instant query.
type promResponse struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	} `json:"data"`
}

// query runs an instant query at atMs against the pusher's query API as
// tenant ("" sends no X-Scope-OrgID header). It returns the HTTP status and
// the decoded body.
func query(t testing.TB, httpAddr, tenant, q string, atMs int64) (int, promResponse) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	form := url.Values{
		"query": {q},
		"time":  {strconv.FormatFloat(float64(atMs)/1000, 'f', 3, 64)},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/api/v1/query?"+form.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if tenant != "" {
		req.Header.Set(queryapi.TenantHeader, tenant)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("query %q: %v", q, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("query %q: read body: %v", q, err)
	}
	var out promResponse
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("query %q: HTTP %d, body %q: %v", q, resp.StatusCode, body, err)
	}
	return resp.StatusCode, out
}

// scalarOf returns the value of a one-sample vector result, and an error
// for anything else.
func scalarOf(r promResponse) (float64, error) {
	if r.Status != "success" {
		return 0, fmt.Errorf("status %q: %s: %s", r.Status, r.ErrorType, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return 0, fmt.Errorf("result type %q, want vector", r.Data.ResultType)
	}
	if len(r.Data.Result) != 1 {
		return 0, fmt.Errorf("%d series in the result, want 1", len(r.Data.Result))
	}
	s, ok := r.Data.Result[0].Value[1].(string)
	if !ok {
		return 0, errors.New("sample value is not a string")
	}
	return strconv.ParseFloat(s, 64)
}

// queryValue runs an instant query that must return one sample and
// returns its value.
func queryValue(t testing.TB, httpAddr, tenant, q string, atMs int64) float64 {
	t.Helper()
	code, r := query(t, httpAddr, tenant, q, atMs)
	if code != http.StatusOK {
		t.Fatalf("tenant %s, query %q: HTTP %d (%s: %s)", tenant, q, code, r.ErrorType, r.Error)
	}
	v, err := scalarOf(r)
	if err != nil {
		t.Fatalf("tenant %s, query %q: %v", tenant, q, err)
	}
	return v
}
