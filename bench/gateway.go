package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Targets of issue 13.
const (
	targetGatewayRatio = 0.70
	targetGatewayP99   = 0.050 // seconds, at half the gateway's capacity
)

// produceMetric is the gateway's histogram of the wait for Kafka's
// acknowledgement of a request's records.
const produceMetric = "ferry_gateway_produce_duration_seconds"

// stageGateway drives ferry-gateway with remote-write clients.
const stageGateway = "gateway"

// gatewayConfig is the gateway stage's flags.
type gatewayConfig struct {
	Clients           int
	Tenants           int
	Partitions        int
	SamplesPerRequest int
	Rounds            int
	Warmup            time.Duration
	Duration          time.Duration
	LatencyFraction   float64
	LatencyDuration   time.Duration
	Profile           bool
	OTLP              bool
	Args              string
}

func (c *gatewayConfig) register(fs *flag.FlagSet) {
	fs.IntVar(&c.Clients, "gateway.clients", 32, "Concurrent remote-write clients of the gateway stage (each one request in flight, like a Prometheus queue shard).")
	fs.IntVar(&c.Tenants, "gateway.tenants", 4, "Tenants the gateway stage's clients are spread over (client i sends as tenant i mod N).")
	fs.IntVar(&c.Partitions, "gateway.partitions", 4, "Partitions of the gateway stage's topic.")
	fs.IntVar(&c.SamplesPerRequest, "gateway.samples-per-request", 2000, "Series of one sample each per remote-write request (Prometheus's default max_samples_per_send).")
	fs.IntVar(&c.Rounds, "gateway.rounds", 3, "Times the ceiling and the gateway are each measured, alternating; the ratio is the median of the rounds.")
	fs.DurationVar(&c.Warmup, "gateway.warmup", 2*time.Second, "Load before each gateway-stage window starts (not measured).")
	fs.DurationVar(&c.Duration, "gateway.duration", 8*time.Second, "Length of each measured window of the gateway stage.")
	fs.Float64Var(&c.LatencyFraction, "gateway.latency-fraction", 0.5, "Request rate of the gateway latency run, as a fraction of the gateway's measured capacity.")
	fs.DurationVar(&c.LatencyDuration, "gateway.latency-duration", 10*time.Second, "Length of the gateway latency window.")
	fs.BoolVar(&c.Profile, "gateway.profile", true, "Take a Go CPU profile of the gateway during its last capacity window and report where its time goes.")
	fs.StringVar(&c.Args, "gateway.args", "", "Extra ferry-gateway flags of the gateway stage, space-separated (for experiments, e.g. a larger -gateway.max-inflight-bytes; the targets assume none).")
	fs.BoolVar(&c.OTLP, "gateway.otlp", true, "After each round's remote-write window, one more window of the same clients sending the same series as OTLP/HTTP (protobuf, gzip) to /otlp/v1/metrics.")
}

func (c *gatewayConfig) validate() error {
	switch {
	case c.Clients <= 0 || c.Tenants <= 0 || c.Partitions <= 0 || c.SamplesPerRequest <= 0 || c.Rounds <= 0:
		return errors.New("-gateway.clients, -gateway.tenants, -gateway.partitions, -gateway.samples-per-request and -gateway.rounds must be positive")
	case c.Duration <= 0 || c.Warmup < 0 || c.LatencyDuration <= 0:
		return errors.New("-gateway.duration and -gateway.latency-duration must be positive, -gateway.warmup not negative")
	case !(c.LatencyFraction > 0 && c.LatencyFraction <= 1):
		return fmt.Errorf("-gateway.latency-fraction must be in (0, 1], got %g", c.LatencyFraction)
	}
	return nil
}

// throughputRun is one measured window of load.
type throughputRun struct {
	Requests, Samples int64
	Failed            int64
	FirstErr          string
	Window            time.Duration
	ProcCPU           time.Duration // the gateway process; 0 for the ceiling
	HarnessCPU        time.Duration // clients, or the ceiling's producer
	BrokerCPU         time.Duration
	Err               string
}

func (t throughputRun) samplesPerSec() float64  { return perSec(float64(t.Samples), t.Window) }
func (t throughputRun) requestsPerSec() float64 { return perSec(float64(t.Requests), t.Window) }

// cpuPerMSamples is CPU seconds per million samples.
func (t throughputRun) cpuPerMSamples(cpu time.Duration) float64 {
	if t.Samples == 0 || cpu <= 0 {
		return math.NaN()
	}
	return cpu.Seconds() / (float64(t.Samples) / 1e6)
}

// gatewayRound is one ceiling window and one gateway window, then with
// -gateway.otlp one window of the same series sent as OTLP.
type gatewayRound struct{ Ceiling, Gateway, OTLP throughputRun }

func (r gatewayRound) ratio() float64 {
	return r.Gateway.samplesPerSec() / r.Ceiling.samplesPerSec()
}

// cpuRatio is the ceiling's CPU per sample (its producer) over the
// gateway process's: the throughput ratio CPU alone predicts.
func (r gatewayRound) cpuRatio() float64 {
	return r.Ceiling.cpuPerMSamples(r.Ceiling.HarnessCPU) / r.Gateway.cpuPerMSamples(r.Gateway.ProcCPU)
}

// gatewayLatency is the open-loop run at a fraction of the capacity.
type gatewayLatency struct {
	Fraction     float64
	RequestRate  float64
	Sent, Failed int64
	FirstErr     string
	Window       time.Duration
	Elapsed      time.Duration // from the first request to the last answer
	Lat          latencySummary
	GatewayCPU   time.Duration
	// The gateway's own ferry_gateway_produce_duration_seconds over the
	// run: how much of a request's time is Kafka's acknowledgement.
	ProduceP50, ProduceP99 float64
	Err                    string
}

// gatewayResult is the gateway stage.
type gatewayResult struct {
	Cfg            gatewayConfig
	RawBytes       int // mean record value (uncompressed request)
	BodyBytes      int // mean HTTP body (snappy)
	OTLPRawBytes   int // mean OTLP request (protobuf)
	OTLPBodyBytes  int // mean OTLP HTTP body (gzip)
	Rounds         []gatewayRound
	Latency        *gatewayLatency
	Profile        []string // go tool pprof -top lines
	ProfileCum     []string
	ProfileSeconds float64
	ProfilePath    string
	// The same profile over the last round's OTLP window.
	OTLPProfile, OTLPProfileCum []string
	Err                         string
}

// median returns the median of f over the rounds that measured both
// sides, with the smallest and largest.
func (g *gatewayResult) median(f func(gatewayRound) float64) (med, lo, hi float64) {
	var xs []float64
	for _, r := range g.Rounds {
		if r.Ceiling.Err == "" && r.Gateway.Err == "" {
			if v := f(r); !math.IsNaN(v) && !math.IsInf(v, 0) {
				xs = append(xs, v)
			}
		}
	}
	return medianOf(xs)
}

func medianOf(xs []float64) (med, lo, hi float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	n := len(xs)
	med = xs[n/2]
	if n%2 == 0 {
		med = (xs[n/2-1] + xs[n/2]) / 2
	}
	return med, xs[0], xs[n-1]
}

// gatewayStage is the gateway stage of a run: its own methods on the
// run's env, so the env does not carry every stage's steps.
type gatewayStage struct{ *env }

// gatewayBin is the private build of ferry-gateway.
func (e gatewayStage) gatewayBin() string { return filepath.Join(e.work, "bin", "ferry-gateway") }

// gatewayBodies returns one request per client: client c sends tenant c
// mod T's block c/T at step 0, so the clients send different series.
// The gateway keeps no state between requests, so resending a client's
// body measures the same work as fresh ones without the harness paying
// to encode and compress while it measures.
func gatewayBodies(cfg gatewayConfig) ([]rwBody, error) {
	sh := gatewayShape(cfg)
	out := make([]rwBody, cfg.Clients)
	for c := range out {
		b, err := sh.body(c%cfg.Tenants, c/cfg.Tenants, 0)
		if err != nil {
			return nil, err
		}
		out[c] = b
	}
	return out, nil
}

// gatewayShape is the data of the gateway stage: each client sends its own
// block of one tenant's series, one sample each, a minute old.
func gatewayShape(cfg gatewayConfig) rwShape {
	return rwShape{
		Tenants:           cfg.Tenants,
		SeriesPerTenant:   cfg.SamplesPerRequest * ((cfg.Clients + cfg.Tenants - 1) / cfg.Tenants),
		SamplesPerRequest: cfg.SamplesPerRequest,
		StartMs:           time.Now().Add(-time.Minute).UnixMilli(), StepMs: 15000,
	}
}

// gatewayOTLPBodies returns the OTLP request of each client carrying the
// same series and samples as its remote-write body from gatewayBodies.
func gatewayOTLPBodies(cfg gatewayConfig) ([]rwBody, error) {
	sh := gatewayShape(cfg)
	out := make([]rwBody, cfg.Clients)
	for c := range out {
		b, err := otlpBody(rwTenant(c%cfg.Tenants), sh.request(c%cfg.Tenants, c/cfg.Tenants, 0))
		if err != nil {
			return nil, err
		}
		out[c] = b
	}
	return out, nil
}

// meanSizes is the mean uncompressed and compressed size of bodies.
func meanSizes(bodies []rwBody) (raw, compressed int) {
	if len(bodies) == 0 {
		return 0, 0
	}
	for _, b := range bodies {
		raw += len(b.Raw)
		compressed += len(b.Compressed)
	}
	return raw / len(bodies), compressed / len(bodies)
}

// measureGateway runs the gateway stage: a ferry-gateway process against
// the broker, its capacity with closed-loop clients against a plain
// franz-go producer of the same records (alternating, -gateway.rounds
// times), then the request latency at a fraction of that capacity.
func (e gatewayStage) measureGateway(ctx context.Context) (res gatewayResult) {
	cfg := e.cfg.Gateway
	res.Cfg = cfg
	fail := func(err error) gatewayResult { res.Err = err.Error(); return res }
	ctx, cancel := context.WithTimeout(ctx, e.cfg.StageTimeout)
	defer cancel()
	bodies, err := gatewayBodies(cfg)
	if err != nil {
		return fail(err)
	}
	res.RawBytes, res.BodyBytes = meanSizes(bodies)
	var otlpBodies []rwBody
	if cfg.OTLP {
		if otlpBodies, err = gatewayOTLPBodies(cfg); err != nil {
			return fail(err)
		}
		res.OTLPRawBytes, res.OTLPBodyBytes = meanSizes(otlpBodies)
	}
	topic, err := e.createTopic(ctx, "gateway", cfg.Partitions)
	if err != nil {
		return fail(err)
	}
	httpAddr, err := freeAddr()
	if err != nil {
		return fail(err)
	}
	args := []string{
		"-kafka.address=" + strings.Join(e.broker.addrs, ","), "-kafka.topic=" + topic,
		"-http.listen-address=" + httpAddr, "-log.level=warn", "-server.enable-pprof",
	}
	args = append(args, strings.Fields(cfg.Args)...)
	gw, err := procs.start("gateway", e.gatewayBin(), args, e.logDir)
	if err != nil {
		return fail(err)
	}
	defer func() {
		if err := gw.stop(30 * time.Second); err != nil && res.Err == "" {
			res.Err = "stopping: " + err.Error()
		}
	}()
	if err := waitReady(ctx, gw, httpAddr, 60*time.Second); err != nil {
		return fail(err)
	}
	url := "http://" + httpAddr + "/api/v1/push"
	cl := newRWClient(cfg.Clients)
	defer cl.CloseIdleConnections()
	next := func(c, _ int) rwBody { return bodies[c] }

	for i := range cfg.Rounds {
		var r gatewayRound
		pause(ctx)
		r.Ceiling = e.gatewayCeiling(ctx, topic, bodies)
		e.logf("gateway round %d: ceiling %s samples/s %s", i+1, fmtNum(r.Ceiling.samplesPerSec()), r.Ceiling.Err)
		pause(ctx)
		last := cfg.Profile && i == cfg.Rounds-1
		prof := e.profileWindow(ctx, last, httpAddr, "gateway.cpu.pprof")
		r.Gateway = e.gatewayWindow(ctx, gw, cl, url, next)
		e.logf("gateway round %d: gateway %s samples/s, %d failed %s %s", i+1, fmtNum(r.Gateway.samplesPerSec()),
			r.Gateway.Failed, r.Gateway.FirstErr, r.Gateway.Err)
		if p, ok := awaitProfile(e.env, prof); ok {
			res.ProfilePath, res.ProfileSeconds = p.path, p.seconds
			res.Profile, res.ProfileCum = p.top, p.cum
		}
		if cfg.OTLP {
			pause(ctx)
			prof := e.profileWindow(ctx, last, httpAddr, "gateway-otlp.cpu.pprof")
			r.OTLP = e.gatewayWindow(ctx, gw, cl, "http://"+httpAddr+"/otlp/v1/metrics", func(c, _ int) rwBody { return otlpBodies[c] })
			e.logf("gateway round %d: OTLP %s samples/s, %d failed %s %s", i+1, fmtNum(r.OTLP.samplesPerSec()),
				r.OTLP.Failed, r.OTLP.FirstErr, r.OTLP.Err)
			if p, ok := awaitProfile(e.env, prof); ok {
				res.OTLPProfile, res.OTLPProfileCum = p.top, p.cum
			}
		}
		res.Rounds = append(res.Rounds, r)
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
	}
	capacity, _, _ := medianOf(func() []float64 {
		var xs []float64
		for _, r := range res.Rounds {
			if r.Gateway.Err == "" && r.Gateway.Requests > 0 {
				xs = append(xs, r.Gateway.requestsPerSec())
			}
		}
		return xs
	}())
	if math.IsNaN(capacity) {
		return fail(errors.New("no gateway capacity measured"))
	}
	pause(ctx)
	l := e.gatewayLatencyRun(ctx, gw, cl, httpAddr, bodies, capacity*cfg.LatencyFraction)
	res.Latency = &l
	e.logf("gateway latency at %.0f requests/s: p50 %s p99 %s (%d requests, %d failed)", l.RequestRate,
		fmtSeconds(l.Lat.P50.Seconds()), fmtSeconds(l.Lat.P99.Seconds()), l.Lat.N, l.Failed)
	if l.Err != "" {
		res.Err = "latency: " + l.Err
	}
	for _, r := range res.Rounds {
		if r.Gateway.Err != "" || r.Ceiling.Err != "" || r.OTLP.Err != "" {
			res.Err = strings.TrimPrefix(res.Err+"; "+r.Gateway.Err+r.Ceiling.Err+r.OTLP.Err, "; ")
		}
	}
	return res
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// gatewayWindow drives the gateway with closed-loop clients for warm-up
// plus the window and counts what was answered 2xx inside the window.
func (e gatewayStage) gatewayWindow(ctx context.Context, gw *child, cl *http.Client, url string, next func(c, n int) rwBody) throughputRun {
	cfg := e.cfg.Gateway
	var res throughputRun
	counts := &sendCounts{}
	loadCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		closedLoop(loadCtx, cl, url, cfg.Clients, next, counts)
	}()
	defer func() { stop(); <-done }()
	if !sleepCtx(ctx, cfg.Warmup) {
		res.Err = ctx.Err().Error()
		return res
	}
	s0, g0, h0, b0, t0 := counts.snapshot(), gw.usage().CPU, selfCPU(), e.brokerCPU(), time.Now()
	if !sleepCtx(ctx, cfg.Duration) {
		res.Err = ctx.Err().Error()
		return res
	}
	s1, g1, h1, b1 := counts.snapshot(), gw.usage().CPU, selfCPU(), e.brokerCPU()
	res.Window = time.Since(t0)
	res.Requests, res.Samples, res.Failed = s1.ok-s0.ok, s1.okSamples-s0.okSamples, s1.failed-s0.failed
	res.ProcCPU, res.HarnessCPU, res.BrokerCPU = g1-g0, h1-h0, b1-b0
	res.FirstErr = counts.errString()
	if gw.exited() {
		res.Err = fmt.Sprintf("gateway exited: %v", gw.exitErr())
	}
	return res
}

// gatewayCeiling produces the gateway's records (key = tenant, value = the
// uncompressed request) with a plain franz-go client configured as the
// gateway's producer (acks=all, idempotent, no linger, Kafka's key
// partitioner, franz-go's default snappy batches), as fast as it can: up
// to 64 MiB buffered, for warm-up plus the window.
func (e gatewayStage) gatewayCeiling(ctx context.Context, topic string, bodies []rwBody) (res throughputRun) {
	cfg := e.cfg.Gateway
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(e.broker.addrs...), kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.ProducerLinger(0), kgo.ProducerBatchMaxBytes(1_000_012),
		kgo.MaxBufferedBytes(64<<20), kgo.MaxBufferedRecords(10000),
	)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer cl.Close()
	counts := &sendCounts{}
	loadCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 0; loadCtx.Err() == nil; n++ {
			b := bodies[n%len(bodies)]
			// Produce blocks while the buffer is full: that is the pacing.
			cl.Produce(loadCtx, &kgo.Record{Key: []byte(b.Tenant), Value: b.Raw}, func(_ *kgo.Record, err error) {
				if !errors.Is(err, context.Canceled) {
					counts.record(b, 204, err)
				}
			})
		}
	}()
	defer func() { stop(); <-done }()
	if !sleepCtx(ctx, cfg.Warmup) {
		res.Err = ctx.Err().Error()
		return res
	}
	s0, h0, b0, t0 := counts.snapshot(), selfCPU(), e.brokerCPU(), time.Now()
	if !sleepCtx(ctx, cfg.Duration) {
		res.Err = ctx.Err().Error()
		return res
	}
	s1, h1, b1 := counts.snapshot(), selfCPU(), e.brokerCPU()
	res.Window = time.Since(t0)
	res.Requests, res.Samples, res.Failed = s1.ok-s0.ok, s1.okSamples-s0.okSamples, s1.failed-s0.failed
	res.HarnessCPU, res.BrokerCPU = h1-h0, b1-b0
	res.FirstErr = counts.errString()
	if res.Failed > 0 {
		res.Err = "ceiling producer: " + res.FirstErr
	}
	return res
}

// gatewayLatencyRun sends requests at rate per second, open loop, and
// measures each request from when it was due to its answer.
func (e gatewayStage) gatewayLatencyRun(ctx context.Context, gw *child, cl *http.Client, httpAddr string, bodies []rwBody, rate float64) (res gatewayLatency) {
	url := "http://" + httpAddr + "/api/v1/push"
	cfg := e.cfg.Gateway
	res.Fraction, res.RequestRate, res.Window = cfg.LatencyFraction, rate, cfg.LatencyDuration
	if !(rate > 0) {
		res.Err = "no rate"
		return res
	}
	counts := &sendCounts{}
	lat := &durations{}
	start := time.Now()
	from, to := start.Add(cfg.Warmup), start.Add(cfg.Warmup+cfg.LatencyDuration)
	loadCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		openLoop(loadCtx, cl, url, rate, 4*cfg.Clients, func(n int) rwBody { return bodies[n%len(bodies)] }, counts, from, to, lat)
	}()
	g0 := gw.usage().CPU
	h0, _ := scrape(ctx, httpAddr)
	// Pacing stops at the window's end; openLoop then waits for every
	// request already sent to be answered.
	ok := sleepCtx(ctx, time.Until(to))
	stop()
	<-done
	if !ok {
		res.Err = ctx.Err().Error()
		return res
	}
	res.GatewayCPU = gw.usage().CPU - g0
	res.Elapsed = time.Since(start)
	res.ProduceP50, res.ProduceP99 = math.NaN(), math.NaN()
	if h1, err := scrape(ctx, httpAddr); err == nil && h0 != nil {
		h := h1.histogram(produceMetric).minus(h0.histogram(produceMetric))
		if h.count > 0 {
			res.ProduceP50, _, _, _ = h.quantile(0.5)
			res.ProduceP99, _, _, _ = h.quantile(0.99)
		}
	}
	s := counts.snapshot()
	res.Sent, res.Failed, res.FirstErr = s.ok, s.failed, counts.errString()
	res.Lat = lat.summary()
	return res
}
