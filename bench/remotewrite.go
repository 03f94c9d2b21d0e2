package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// targetRemoteWriteRatio is issue 14's target: the pipeline reaches at
// least this share of what the receiver ingests from a plain client.
const targetRemoteWriteRatio = 0.80

// stageRemoteWrite runs the pipeline with the remote-write backend in front
// of a real Prometheus.
const stageRemoteWrite = "remote-write"

// appendedMetric counts the samples Prometheus's head appended: the
// receiver's own measure of what it ingested.
const appendedMetric = "prometheus_tsdb_head_samples_appended_total"

// rwConfig is the remote-write stage's flags.
type rwConfig struct {
	Tenants           int
	SeriesPerTenant   int
	SamplesPerRequest int
	Steps             int
	Partitions        int
	Rounds            int
	Prometheus        string
}

func (c *rwConfig) register(fs *flag.FlagSet) {
	fs.IntVar(&c.Tenants, "remote-write.tenants", 8, "Tenants of the remote-write stage's data; the plain client sends each tenant's requests in order on its own connection.")
	fs.IntVar(&c.SeriesPerTenant, "remote-write.series", 5000, "Series per tenant of the remote-write stage.")
	fs.IntVar(&c.SamplesPerRequest, "remote-write.samples-per-request", 2000, "Series of one sample each per request of the remote-write stage.")
	fs.IntVar(&c.Steps, "remote-write.steps", 24, "Samples per series (scrapes, 15 s apart) of the remote-write stage: the data is tenants x series x steps samples.")
	fs.IntVar(&c.Partitions, "remote-write.partitions", 4, "Partitions of the remote-write stage's backlog (one ferry-consumer each).")
	fs.IntVar(&c.Rounds, "remote-write.rounds", 5, "Rounds of the remote-write stage: in each, the plain client at full speed, the plain client with the pipeline's concurrency and the pipeline each fill a fresh Prometheus, a different one first; the ratios are the medians of the rounds.")
	fs.StringVar(&c.Prometheus, "remote-write.prometheus", "prometheus", "The Prometheus binary the remote-write stage writes to (started with --web.enable-remote-write-receiver and a fresh storage directory each run).")
}

func (c *rwConfig) validate() error {
	if c.Tenants <= 0 || c.SeriesPerTenant <= 0 || c.SamplesPerRequest <= 0 || c.Steps <= 0 || c.Partitions <= 0 || c.Rounds <= 0 {
		return errors.New("-remote-write.tenants, -remote-write.series, -remote-write.samples-per-request, -remote-write.steps, -remote-write.partitions and -remote-write.rounds must be positive")
	}
	return nil
}

// rwRun is one fill of a fresh Prometheus.
type rwRun struct {
	Samples       int64   // sent
	Appended      float64 // Prometheus's count at the end
	Elapsed       time.Duration
	SteadySamples int64
	Steady        time.Duration
	PromCPU       time.Duration
	HarnessCPU    time.Duration // the plain client
	ConsumerCPU   time.Duration
	PusherCPU     time.Duration
	Failed        int64
	Check         string
	Err           string
}

// samplesPerSec is the rate between 10 % and 90 % of the data appended,
// the whole-run rate when the scrapes did not see that window.
func (r rwRun) samplesPerSec() float64 {
	if r.SteadySamples > 0 && r.Steady > 0 {
		return perSec(float64(r.SteadySamples), r.Steady)
	}
	return perSec(float64(r.Samples), r.Elapsed)
}

// promCPUPerMSamples is Prometheus's CPU seconds per million samples.
func (r rwRun) promCPUPerMSamples() float64 {
	if r.Samples == 0 || r.PromCPU <= 0 {
		return math.NaN()
	}
	return r.PromCPU.Seconds() / (float64(r.Samples) / 1e6)
}

// rwRound is one fill of a fresh Prometheus by each of: the plain client
// at full speed (one stream per series block: every stream whose series
// are disjoint may send at once), the plain client with the pipeline's
// concurrency (one stream per tenant, as the pusher keeps a tenant's
// requests in order) and the pipeline.
type rwRound struct{ Direct, Tenant, Pipeline rwRun }

// ratio is the target's: pipeline over the plain client at full speed.
func (r rwRound) ratio() float64 { return r.Pipeline.samplesPerSec() / r.Direct.samplesPerSec() }

// tenantRatio is pipeline over the plain client with one stream per tenant.
func (r rwRound) tenantRatio() float64 { return r.Pipeline.samplesPerSec() / r.Tenant.samplesPerSec() }

// rwResult is the remote-write stage.
type rwResult struct {
	Cfg        rwConfig
	Version    string
	Records    int64
	Samples    int64
	RawBytes   int64
	BodyBytes  int64
	Rounds     []rwRound
	Streams    int // of the plain client at full speed
	ProduceDur time.Duration
	Err        string
}

func (r *rwResult) median(f func(rwRound) float64) (med, lo, hi float64) {
	var xs []float64
	for _, rd := range r.Rounds {
		if rd.Direct.Err == "" && rd.Tenant.Err == "" && rd.Pipeline.Err == "" {
			if v := f(rd); !math.IsNaN(v) && !math.IsInf(v, 0) {
				xs = append(xs, v)
			}
		}
	}
	return medianOf(xs)
}

// byBlock splits each tenant's requests into one stream per series block,
// each in step order.
func byBlock(bodies [][]rwBody, blocks int) [][]rwBody {
	var out [][]rwBody
	for _, tb := range bodies {
		for b := range blocks {
			var s []rwBody
			for i := b; i < len(tb); i += blocks {
				s = append(s, tb[i])
			}
			out = append(out, s)
		}
	}
	return out
}

// measureRemoteWrite runs the remote-write stage: the same requests sent
// to a fresh Prometheus by a plain remote-write client and through Kafka,
// ferry-consumer and ferry-pusher -pusher.backend=remote-write.
func (e *env) measureRemoteWrite(ctx context.Context) (res rwResult) {
	cfg := e.cfg.RemoteWrite
	res.Cfg = cfg
	fail := func(err error) rwResult { res.Err = err.Error(); return res }
	bin, err := exec.LookPath(cfg.Prometheus)
	if err != nil {
		return fail(fmt.Errorf("no Prometheus to write to (-remote-write.prometheus %q): %w", cfg.Prometheus, err))
	}
	if out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput(); err == nil {
		res.Version, _, _ = strings.Cut(string(out), "\n")
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.StageTimeout)
	defer cancel()

	sh := rwShape{
		Tenants: cfg.Tenants, SeriesPerTenant: cfg.SeriesPerTenant, SamplesPerRequest: cfg.SamplesPerRequest,
		StepMs: 15000,
	}
	// Recent, so Prometheus's head takes them; ending a minute ago.
	sh.StartMs = time.Now().Add(-time.Minute).UnixMilli() - int64(cfg.Steps)*sh.StepMs
	e.logf("remote-write: generating %d tenants x %d series x %d steps", cfg.Tenants, cfg.SeriesPerTenant, cfg.Steps)
	bodies := make([][]rwBody, cfg.Tenants)
	for t := range bodies {
		if bodies[t], err = sh.tenantBodies(t, cfg.Steps); err != nil {
			return fail(err)
		}
		for _, b := range bodies[t] {
			res.Records++
			res.Samples += int64(b.Samples)
			res.RawBytes += int64(len(b.Raw))
			res.BodyBytes += int64(len(b.Compressed))
		}
	}
	start := time.Now()
	topic, err := e.produceRW(ctx, bodies)
	if err != nil {
		return fail(err)
	}
	res.ProduceDur = time.Since(start)
	// The raw values are in Kafka now; the plain client needs only the
	// compressed bodies.
	for t := range bodies {
		for i := range bodies[t] {
			bodies[t][i].Raw = nil
		}
	}
	streams := byBlock(bodies, sh.blocks())
	res.Streams = len(streams)
	for i := range cfg.Rounds {
		var rd rwRound
		runs := []func(){
			func() { rd.Direct = e.rwDirect(ctx, bin, streams, res.Samples) },
			func() { rd.Tenant = e.rwDirect(ctx, bin, bodies, res.Samples) },
			func() { rd.Pipeline = e.rwPipeline(ctx, bin, topic, res.Records, res.Samples) },
		}
		// Each round starts with a different run: drift of the shared
		// machine's speed is spread over all three.
		runs = append(runs[i%len(runs):], runs[:i%len(runs)]...)
		for _, run := range runs {
			pause(ctx)
			run()
		}
		e.logf("remote-write round %d: plain client %s samples/s (%d streams), %s (%d streams), pipeline %s samples/s: %s, %s %s%s%s", i+1,
			fmtNum(rd.Direct.samplesPerSec()), len(streams), fmtNum(rd.Tenant.samplesPerSec()), len(bodies), fmtNum(rd.Pipeline.samplesPerSec()),
			pct(rd.ratio()), pct(rd.tenantRatio()), rd.Direct.Err, rd.Tenant.Err, rd.Pipeline.Err)
		res.Rounds = append(res.Rounds, rd)
		for _, r := range []rwRun{rd.Direct, rd.Tenant, rd.Pipeline} {
			if r.Err != "" {
				res.Err = strings.TrimPrefix(res.Err+"; "+r.Err, "; ")
			}
		}
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
	}
	return res
}

// produceRW puts every tenant's requests in a fresh topic in their order,
// tenant t on partition t mod P, key = tenant, as the gateway would.
func (e *env) produceRW(ctx context.Context, bodies [][]rwBody) (string, error) {
	cfg := e.cfg.RemoteWrite
	topic, err := e.createTopic(ctx, "remote-write", cfg.Partitions)
	if err != nil {
		return "", err
	}
	cl, err := e.producer()
	if err != nil {
		return "", err
	}
	defer cl.Close()
	var (
		mu    sync.Mutex
		first error
	)
	for i := 0; ; i++ {
		more := false
		for t := range bodies {
			if i >= len(bodies[t]) {
				continue
			}
			more = true
			b := bodies[t][i]
			cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(t % cfg.Partitions), Key: []byte(b.Tenant), Value: b.Raw}, //nolint:gosec // small
				func(_ *kgo.Record, err error) {
					if err != nil {
						mu.Lock()
						first = cmp.Or(first, err)
						mu.Unlock()
					}
				})
		}
		if !more {
			break
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return "", err
	}
	mu.Lock()
	defer mu.Unlock()
	if first != nil {
		return "", fmt.Errorf("produce to %s: %w", topic, first)
	}
	return topic, nil
}

// rwDirect sends the requests of streams to a fresh Prometheus, one
// sender per stream sending its requests in order (a series must not go
// back in time), all streams at once, each request as soon as the previous
// was answered.
func (e *env) rwDirect(ctx context.Context, bin string, bodies [][]rwBody, total int64) (res rwRun) {
	res.Samples = total
	p, err := e.startPrometheus(ctx, bin, "rw-direct-prometheus")
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer p.finish(ctx, &res, p.usage().CPU)
	url := "http://" + p.addr + "/api/v1/write"
	cl := newRWClient(len(bodies))
	defer cl.CloseIdleConnections()
	counts := &sendCounts{}
	cpu0 := selfCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for t := range bodies {
		wg.Go(func() {
			for _, b := range bodies[t] {
				if ctx.Err() != nil {
					return
				}
				status, err := postRW(ctx, cl, url, b)
				counts.record(b, status, err)
			}
		})
	}
	sent := make(chan struct{})
	go func() { wg.Wait(); close(sent) }()
	var sentAt time.Time
	sentAll := func() error {
		select {
		case <-sent:
		default:
			return nil
		}
		if sentAt.IsZero() {
			sentAt = time.Now()
		}
		switch {
		case counts.failed.Load() > 0:
			return fmt.Errorf("%d requests failed, first: %s", counts.failed.Load(), counts.errString())
		case time.Since(sentAt) > 5*time.Second:
			// Every request was answered 2xx, yet the counter stays short.
			n, _ := p.appended(ctx)
			return fmt.Errorf("every request answered 2xx but Prometheus appended %.0f of %d samples", n, total)
		}
		return nil
	}
	elapsed, w, err := p.watchAppended(ctx, start, total, sentAll)
	<-sent
	res.HarnessCPU = selfCPU() - cpu0
	res.Failed = counts.failed.Load()
	if err != nil {
		res.Err = "plain client: " + err.Error()
		return res
	}
	res.Elapsed = elapsed
	res.SteadySamples, res.Steady = w.result()
	return res
}

// rwPipeline replays the backlog through ferry-consumer processes and a
// ferry-pusher with the remote-write backend into a fresh Prometheus,
// until Prometheus has appended every sample.
func (e *env) rwPipeline(ctx context.Context, bin, topic string, records, total int64) (res rwRun) {
	res.Samples = total
	p, err := e.startPrometheus(ctx, bin, "rw-pipeline-prometheus")
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer p.finish(ctx, &res, p.usage().CPU)
	// Prometheus is one tenant: the tenant header would be ignored.
	pu, err := e.startPusher(ctx, "rw-pusher", "remote-write",
		"-remote-write.url=http://"+p.addr+"/api/v1/write", "-remote-write.send-tenant=false")
	if err != nil {
		res.Err = err.Error()
		return res
	}
	var cs []*consumerProc
	defer func() {
		if err := stopAll(cs, pu); err != nil && res.Err == "" {
			res.Err = "stopping: " + err.Error()
		}
	}()
	pu0 := pu.usage().CPU
	group := fmt.Sprintf("bench-rw-%08x", rand.Uint32())
	start := time.Now()
	cs, err = e.startConsumers(ctx, "rw", topic, group, pu.grpcAddr, e.cfg.RemoteWrite.Partitions)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	alive := func() error {
		for _, c := range append([]*child{pu.child}, childrenOf(cs)...) {
			if c.exited() {
				return fmt.Errorf("%s exited: %w", c.name, c.exitErr())
			}
		}
		return nil
	}
	elapsed, w, err := p.watchAppended(ctx, start, total, alive)
	if err != nil {
		res.Err = "pipeline: " + err.Error()
		return res
	}
	res.Elapsed = elapsed
	res.SteadySamples, res.Steady = w.result()
	res.PusherCPU = pu.usage().CPU - pu0
	for _, c := range cs {
		res.ConsumerCPU += c.usage().CPU
	}
	if m, err := scrape(ctx, pu.httpAddr); err == nil {
		ok := m.sum("ferry_pusher_remote_write_requests_total", map[string]string{"code": "204"}) +
			m.sum("ferry_pusher_remote_write_requests_total", map[string]string{"code": "200"})
		if all := m.sum("ferry_pusher_remote_write_requests_total", nil); all != ok || ok != float64(records) {
			res.Check = fmt.Sprintf("pusher sent %.0f requests, %.0f answered 2xx, for %d records", all, ok, records)
		}
	}
	return res
}
