package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/loadgen"
)

const latencyMetric = "ferry_consumer_produce_to_ack_seconds"

// measureLatency produces at rate records/s into a fresh topic read by
// consumer processes and a discard pusher, and reads produce-to-ack
// quantiles from the consumers' histogram over a window after a warm-up.
// The histogram measures from the record's timestamp, which the producer
// client sets when Produce is called, to the final acknowledgement, so it
// covers producer batching, the broker, fetch, decode, push and ack.
func (e *env) measureLatency(ctx context.Context, shape Shape, capacity, fraction float64) (res latencyResult) {
	res = latencyResult{Shape: shape, Capacity: capacity, Fraction: fraction, Rate: capacity * fraction, Window: e.cfg.LatencyDuration}
	fail := func(err error) latencyResult { res.Err = err.Error(); return res }
	if !(res.Rate > 0) {
		return fail(errors.New("no pipeline(discard) capacity measured for the shape"))
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.StageTimeout)
	defer cancel()
	topic, err := e.createTopic(ctx, "latency-"+shape.Name(), shape.Partitions)
	if err != nil {
		return fail(err)
	}
	p, err := e.startPusher(ctx, "latency-pusher", "discard")
	if err != nil {
		return fail(err)
	}
	var cs []*consumerProc
	defer func() {
		if err := stopAll(cs, p); err != nil && res.Err == "" {
			res.Err = "stopping: " + err.Error()
		}
	}()
	group := fmt.Sprintf("bench-latency-%08x", rand.Uint32())
	cs, err = e.startConsumers(ctx, "latency", topic, group, p.grpcAddr, shape.Partitions)
	if err != nil {
		return fail(err)
	}
	for _, c := range cs {
		if err := waitReady(ctx, c.child, c.httpAddr, 60*time.Second); err != nil {
			return fail(err)
		}
	}

	// The latency includes the producer's linger (it runs from Produce on),
	// as it would for a real producer; so do the Kafka references.
	cl, err := e.producer(kgo.ProducerLinger(e.cfg.LatencyLinger))
	if err != nil {
		return fail(err)
	}
	defer cl.Close()
	values := make([][]byte, shape.Tenants)
	keys := make([][]byte, shape.Tenants)
	gen := loadgen.Shape{Series: shape.Series, StartMs: time.Now().UnixMilli(), StepMs: 1}
	for i := range values {
		keys[i] = []byte(loadgen.Tenant(i))
		values[i] = gen.Marshal(loadgen.Tenant(i), 0)
	}
	var (
		produced   atomic.Int64
		produceErr atomic.Pointer[error]
		wg         sync.WaitGroup
		// Exact references measured in the harness during the window:
		// Produce to the broker's ack, and Produce to a plain franz-go
		// consumer having the record (Kafka's share of the latency).
		measuring atomic.Bool
		ackLat    = &durations{}
		fetchLat  = &durations{}
	)
	refCtx, stopRef := context.WithCancel(ctx)
	defer stopRef()
	offsets := map[int32]kgo.Offset{}
	for p := range shape.Partitions {
		offsets[int32(p)] = kgo.NewOffset().AtStart()
	}
	ref, err := kgo.NewClient(kgo.SeedBrokers(e.broker.addrs...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}))
	if err != nil {
		return fail(err)
	}
	defer ref.Close()
	wg.Go(func() {
		for refCtx.Err() == nil {
			fetches := ref.PollFetches(refCtx)
			now := time.Now()
			if !measuring.Load() {
				continue
			}
			fetches.EachRecord(func(r *kgo.Record) { fetchLat.add(now.Sub(r.Timestamp)) })
		}
	})
	prodCtx, stopProducing := context.WithCancel(ctx)
	defer stopProducing()
	wg.Go(func() {
		// Paced in 1 ms steps: each step sends what is due by then.
		start := time.Now()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		var n int64
		for {
			select {
			case <-prodCtx.Done():
				return
			case <-tick.C:
			}
			due := int64(res.Rate * time.Since(start).Seconds())
			for ; n < due; n++ {
				ti := int(n % int64(shape.Tenants))
				cl.Produce(prodCtx, &kgo.Record{Topic: topic, Partition: int32(ti % shape.Partitions), Key: keys[ti], Value: values[ti]}, //nolint:gosec // small
					func(r *kgo.Record, err error) {
						if err != nil && !errors.Is(err, context.Canceled) {
							produceErr.CompareAndSwap(nil, &err)
						}
						if err == nil && measuring.Load() {
							ackLat.add(time.Since(r.Timestamp))
						}
					})
				produced.Add(1)
			}
		}
	})
	defer func() { stopProducing(); stopRef(); wg.Wait() }()

	// snapshot scrapes every consumer; native is the sum of their native
	// histograms, nativeOK whether each one had its native buckets.
	type snap struct {
		h          histogram
		native     nativeHistogram
		nativeOK   bool
		acked      float64
		ccpu, pcpu time.Duration
	}
	snapshot := func() (snap, error) {
		s := snap{nativeOK: true}
		for _, c := range cs {
			m, err := scrape(ctx, c.httpAddr)
			if err != nil {
				return s, err
			}
			n, ok, err := scrapeNative(ctx, c.httpAddr, latencyMetric)
			if err != nil {
				return s, err
			}
			s.h = s.h.add(m.histogram(latencyMetric))
			s.native, s.nativeOK = s.native.add(n), s.nativeOK && ok
			s.acked += m.sum("ferry_consumer_acks_total", map[string]string{"status": "ok"})
			s.ccpu += c.usage().CPU
		}
		s.pcpu = p.usage().CPU
		return s, nil
	}
	select {
	case <-ctx.Done():
		return fail(ctx.Err())
	case <-time.After(e.cfg.LatencyWarmup):
	}
	s0, err := snapshot()
	if err != nil {
		return fail(err)
	}
	harness0, broker0 := selfCPU(), e.brokerCPU()
	produced0 := produced.Load()
	measuring.Store(true)
	select {
	case <-ctx.Done():
		return fail(ctx.Err())
	case <-time.After(e.cfg.LatencyDuration):
	}
	measuring.Store(false)
	s1, err := snapshot()
	if err != nil {
		return fail(err)
	}
	if p := produceErr.Load(); p != nil {
		return fail(fmt.Errorf("produce: %w", *p))
	}
	res.Produced = produced.Load() - produced0
	res.Acked = s1.acked - s0.acked
	res.ConsumerCPU, res.PusherCPU = s1.ccpu-s0.ccpu, s1.pcpu-s0.pcpu
	res.HarnessCPU, res.BrokerCPU = selfCPU()-harness0, e.brokerCPU()-broker0
	// The native buckets (about 4.4% wide) when every consumer has them;
	// the classic ones (25% wide) from a consumer built without.
	h := s1.h.minus(s0.h)
	if s0.nativeOK && s1.nativeOK {
		h, res.Native = s1.native.minus(s0.native).histogram(), true
	}
	res.Observations = h.count
	if h.count > 0 {
		res.Mean = h.sum / h.count
	}
	res.P50, _, _, _ = h.quantile(0.5)
	res.P90, _, _, _ = h.quantile(0.9)
	res.P99, res.P99Lo, res.P99Hi, _ = h.quantile(0.99)
	res.P999, _, _, _ = h.quantile(0.999)
	res.ProduceAck = ackLat.summary()
	res.KafkaFetch = fetchLat.summary()
	return res
}

// durations collects exact latencies.
type durations struct {
	mu sync.Mutex
	ds []time.Duration
}

func (d *durations) add(x time.Duration) {
	d.mu.Lock()
	d.ds = append(d.ds, x)
	d.mu.Unlock()
}

// latencySummary is exact quantiles of a set of latencies.
type latencySummary struct {
	N                  int
	P50, P90, P99, Max time.Duration
}

func (d *durations) summary() latencySummary {
	d.mu.Lock()
	ds := slices.Clone(d.ds)
	d.mu.Unlock()
	if len(ds) == 0 {
		return latencySummary{}
	}
	slices.Sort(ds)
	q := func(f float64) time.Duration { return ds[min(len(ds)-1, int(f*float64(len(ds))))] }
	return latencySummary{N: len(ds), P50: q(0.5), P90: q(0.9), P99: q(0.99), Max: ds[len(ds)-1]}
}
