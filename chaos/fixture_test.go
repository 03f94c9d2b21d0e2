package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
	"github.com/ferrylabs/ferry/pusher/pushertest"
)

// The consumers' commit interval and retry bounds in these tests.
const (
	commitInterval = time.Second
	backoffMin     = 100 * time.Millisecond
	backoffMax     = 2 * time.Second
	maxInflight    = 512 // -consumer.max-inflight-requests (its default)
)

// pipeline is one test's topic, consumer group and payload shape.
type pipeline struct {
	t          testing.TB
	broker     *kafkatest.Broker
	topic      string
	group      string
	partitions int
	tenants    int
	shape      loadgen.Shape
}

// newPipeline creates a topic. Tenant i is written to partition
// i % partitions only, so each tenant's samples arrive in order (two
// consumers pushing one tenant's series would race each other into
// out-of-order rejections, which is not what these tests are about).
func newPipeline(t testing.TB, partitions, tenants, series int) *pipeline {
	t.Helper()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, int32(partitions))
	// Samples start 30 minutes ago, 100ms apart: 18,000 steps fit before
	// now, all within the TSDB head's appendable range, none in the future.
	start := time.Now().Add(-30 * time.Minute).Truncate(time.Second)
	return &pipeline{
		t: t, broker: b, topic: topic, group: "chaos-" + topic,
		partitions: partitions, tenants: tenants,
		shape: loadgen.Shape{Series: series, StartMs: start.UnixMilli(), StepMs: 100},
	}
}

func (pl *pipeline) tenantPartition(i int) int32 { return int32(i % pl.partitions) }

// consumerArgs are the flags of the consumer of one partition.
func (pl *pipeline) consumerArgs(partition int, pusherAddr string, extra ...string) []string {
	return append([]string{
		"-kafka.address=" + pl.broker.Addrs()[0],
		"-kafka.topic=" + pl.topic,
		"-kafka.consumer-group=" + pl.group,
		"-instance-id=consumer-" + strconv.Itoa(partition),
		"-pusher.address=" + pusherAddr,
		"-kafka.commit-interval=" + commitInterval.String(),
		"-consumer.backoff-min=" + backoffMin.String(),
		"-consumer.backoff-max=" + backoffMax.String(),
		"-consumer.max-inflight-requests=" + strconv.Itoa(maxInflight),
		"-shutdown-timeout=5s",
	}, extra...)
}

// startConsumers starts one consumer process per partition and waits until
// each is ready (start offsets loaded, stream to the pusher open).
func (pl *pipeline) startConsumers(pusherAddr string, extra ...string) []*proc {
	pl.t.Helper()
	bin, _ := binaries(pl.t)
	cs := make([]*proc, pl.partitions)
	for i := range cs {
		cs[i] = newProc(pl.t, fmt.Sprintf("consumer-%d", i), bin, freeAddr(pl.t), pl.consumerArgs(i, pusherAddr, extra...)...)
		cs[i].start()
	}
	for _, c := range cs {
		c.waitReady(60 * time.Second)
	}
	return cs
}

// startPusherProc starts ferry-pusher with the TSDB backend and waits until
// it is ready.
func startPusherProc(t testing.TB, extra ...string) *proc {
	t.Helper()
	_, bin := binaries(t)
	grpcAddr := freeAddr(t)
	args := append([]string{
		"-grpc.listen-address=" + grpcAddr,
		"-pusher.backend=tsdb",
		"-storage.path=" + filepath.Join(t.TempDir(), "tsdb"),
		"-shutdown-timeout=5s",
	}, extra...)
	p := newProc(t, "pusher", bin, freeAddr(t), args...)
	p.grpcAddr = grpcAddr
	p.start()
	p.waitReady(60 * time.Second)
	return p
}

// committed returns the group's committed offsets.
func (pl *pipeline) committed() map[int32]int64 {
	return pl.broker.CommittedOffsets(pl.t, pl.group, pl.topic)
}

// ends returns the partitions' end offsets.
func (pl *pipeline) ends() map[int32]int64 {
	return pl.broker.EndOffsets(pl.t, pl.topic)
}

// waitCommittedToEnd waits until every partition is committed up to its end
// offset, the proof that every record was acknowledged.
func (pl *pipeline) waitCommittedToEnd(timeout time.Duration) map[int32]int64 {
	pl.t.Helper()
	ends := pl.ends()
	var got map[int32]int64
	deadline := time.Now().Add(timeout)
	for {
		got = pl.committed()
		done := true
		for p, end := range ends {
			if got[p] != end {
				done = false
			}
			if got[p] > end {
				pl.t.Fatalf("partition %d committed %d, beyond its end offset %d", p, got[p], end)
			}
		}
		if done {
			return got
		}
		if time.Now().After(deadline) {
			pl.t.Fatalf("after %s: committed %s, end offsets %s", timeout, formatOffsets(got), formatOffsets(ends))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------
// Producing.

type tenantStep struct {
	tenant string
	step   int
}

// producer writes the deterministic load: for every step, one record per
// tenant, tenant i to partition i % partitions, in step order.
type producer struct {
	pl *pipeline
	cl *kgo.Client

	produced atomic.Int64
	mu       sync.Mutex
	offsets  map[tenantStep]int64 // where each record landed
}

func (pl *pipeline) newProducer() *producer {
	cl := pl.broker.Client(pl.t,
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond),
		// Survive a broker restart: retry until the context gives up.
		kgo.RecordDeliveryTimeout(0),
	)
	return &producer{pl: pl, cl: cl, offsets: map[tenantStep]int64{}}
}

// produce writes steps [from, to) of every tenant, spread evenly over
// roughly d (0: as fast as possible), in batches of whole steps.
func (pr *producer) produce(ctx context.Context, from, to int, d time.Duration) error {
	const batchRecords = 500
	stepsPerBatch := max(1, batchRecords/pr.pl.tenants)
	batches := (to - from + stepsPerBatch - 1) / stepsPerBatch
	start := time.Now()
	for b := range batches {
		if d > 0 {
			sleepCtx(ctx, time.Until(start.Add(d*time.Duration(b)/time.Duration(batches))))
		}
		lo := from + b*stepsPerBatch
		hi := min(to, lo+stepsPerBatch)
		recs := make([]*kgo.Record, 0, (hi-lo)*pr.pl.tenants)
		for step := lo; step < hi; step++ {
			for i := range pr.pl.tenants {
				tenant := loadgen.Tenant(i)
				recs = append(recs, &kgo.Record{
					Topic:     pr.pl.topic,
					Partition: pr.pl.tenantPartition(i),
					Key:       []byte(tenant),
					Value:     pr.pl.shape.Marshal(tenant, step),
				})
			}
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := pr.cl.ProduceSync(pctx, recs...).FirstErr()
		cancel()
		if err != nil {
			return fmt.Errorf("produce steps [%d, %d): %w", lo, hi, err)
		}
		pr.mu.Lock()
		for _, r := range recs {
			ts := tenantStep{string(r.Key), stepOf(r.Value)}
			pr.offsets[ts] = r.Offset
		}
		pr.mu.Unlock()
		pr.produced.Add(int64(len(recs)))
	}
	return nil
}

// produceInBackground runs produce in a goroutine; the returned channel
// yields its error once it finished.
func (pr *producer) produceInBackground(ctx context.Context, from, to int, d time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() { done <- pr.produce(ctx, from, to, d) }()
	return done
}

func (pr *producer) offset(tenant string, step int) (int64, bool) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	o, ok := pr.offsets[tenantStep{tenant, step}]
	return o, ok
}

// stepOf decodes the step of a loadgen record: series 0's value is the step.
func stepOf(value []byte) int {
	var req prompb.WriteRequest
	if err := req.Unmarshal(value); err != nil || len(req.Timeseries) == 0 || len(req.Timeseries[0].Samples) == 0 {
		return -1
	}
	return int(req.Timeseries[0].Samples[0].Value)
}

// ---------------------------------------------------------------------------
// Verification against the pusher's TSDB through its query API.

// tsdbCheck is what the queries found.
type tsdbCheck struct {
	records int64 // distinct records stored: samples / series
	lost    int64 // produced records with at least one sample missing
}

// verifyTSDB proves, tenant by tenant, that every sample of steps [0, steps)
// is stored: the number of samples equals series*steps (the TSDB keeps one
// sample per series and timestamp, so this counts distinct samples), the
// series are exactly the produced ones, and the sum of the values equals
// the sum loadgen's formula gives, so no sample has a wrong value either.
func (pl *pipeline) verifyTSDB(pusherHTTP string, steps int) tsdbCheck {
	pl.t.Helper()
	first := time.UnixMilli(pl.shape.StartMs)
	at := first.Add(time.Duration(steps) * time.Duration(pl.shape.StepMs) * time.Millisecond)
	rng := fmt.Sprintf("%dms", at.Sub(first).Milliseconds()+60_000)
	series := pl.shape.Series
	var res tsdbCheck
	for i := range pl.tenants {
		tenant := loadgen.Tenant(i)
		get := func(q string) float64 {
			v, ok, err := queryScalar(pusherHTTP, tenant, q, at)
			if err != nil {
				pl.t.Fatalf("tenant %s: %v", tenant, err)
			}
			if !ok {
				return 0
			}
			return v
		}
		samples := int64(get("sum(count_over_time(ferry_demo_value[" + rng + "]))"))
		nSeries := int64(get("count(count_over_time(ferry_demo_value[" + rng + "]))"))
		sum := get("sum(sum_over_time(ferry_demo_value[" + rng + "]))")
		wantSamples := int64(steps * series)
		var wantSum float64
		for s := range series {
			wantSum += float64(s)*1000*float64(steps) + float64(steps)*float64(steps-1)/2
		}
		res.records += samples / int64(series)
		if samples < wantSamples {
			res.lost += (wantSamples - samples + int64(series) - 1) / int64(series)
		}
		if samples != wantSamples || nSeries != int64(series) || math.Abs(sum-wantSum) > 0.5 {
			pl.t.Errorf("tenant %s: stored %d samples in %d series with sum %.0f; produced %d samples in %d series with sum %.0f",
				tenant, samples, nSeries, sum, wantSamples, series, wantSum)
		}
	}
	return res
}

// ---------------------------------------------------------------------------
// In-process pusher with a recording backend, for tests that need to
// control the pusher's answers or see each request.

type applyEvent struct {
	tenant string
	step   int
	at     time.Time
}

// recBackend records every request it applies, by tenant and step. It can
// be slowed down and made to fail.
type recBackend struct {
	delay atomic.Int64 // nanoseconds each Push sleeps before applying

	mu       sync.Mutex
	applied  []applyEvent
	count    map[tenantStep]int
	failing  func(tenant string, step int) bool
	failures []applyEvent // requests answered with a server error by failing
	canceled []applyEvent // in-flight requests whose stream was cancelled
}

func newRecBackend() *recBackend { return &recBackend{count: map[tenantStep]int{}} }

var errInjected = fmt.Errorf("chaos: injected storage failure")

func (b *recBackend) Push(ctx context.Context, tenant string, req *prompb.WriteRequest) (backend.Result, error) {
	step := -1
	if len(req.Timeseries) > 0 && len(req.Timeseries[0].Samples) > 0 {
		step = int(req.Timeseries[0].Samples[0].Value)
	}
	if d := time.Duration(b.delay.Load()); d > 0 {
		tm := time.NewTimer(d)
		select {
		case <-tm.C:
		case <-ctx.Done():
			tm.Stop()
			b.mu.Lock()
			b.canceled = append(b.canceled, applyEvent{tenant, step, time.Now()})
			b.mu.Unlock()
			return backend.Result{}, ctx.Err()
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if b.failing != nil && b.failing(tenant, step) {
		b.failures = append(b.failures, applyEvent{tenant, step, now})
		return backend.Result{}, errInjected // a plain error: SERVER_ERROR
	}
	b.applied = append(b.applied, applyEvent{tenant, step, now})
	b.count[tenantStep{tenant, step}]++
	return backend.Result{Accepted: backend.Count(req)}, nil
}

func (b *recBackend) Sync(context.Context) (int, error) { return 0, nil }
func (b *recBackend) Close() error                      { return nil }

func (b *recBackend) setFailing(f func(tenant string, step int) bool) {
	b.mu.Lock()
	b.failing = f
	b.mu.Unlock()
}

func (b *recBackend) appliedCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.applied)
}

func (b *recBackend) snapshot() (applied, failures, canceled []applyEvent) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]applyEvent(nil), b.applied...), append([]applyEvent(nil), b.failures...), append([]applyEvent(nil), b.canceled...)
}

// missing returns how many of steps [0, steps) of every tenant were never
// applied, and how many applications were repeats.
func (b *recBackend) missing(tenants, steps int) (lost, duplicates int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range tenants {
		for s := range steps {
			n := b.count[tenantStep{loadgen.Tenant(i), s}]
			if n == 0 {
				lost++
			} else {
				duplicates += int64(n - 1)
			}
		}
	}
	return lost, duplicates
}

// startInprocPusher serves b on a loopback port until the test ends.
// Its log goes to a file that is dumped if the test fails.
func startInprocPusher(t testing.TB, b backend.Backend) string {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "inproc-pusher.log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	// Registered before the service, so it runs once the service stopped.
	t.Cleanup(func() {
		_ = f.Close()
		keepLog(t, logPath, "inproc-pusher")
		if t.Failed() {
			t.Logf("in-process pusher log: %s", logPath)
		}
	})
	return pushertest.Serve(t, freeAddr(t), b, slog.New(slog.NewTextHandler(f, nil)))
}
