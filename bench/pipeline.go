package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// pipelineOpts varies a pipeline run.
type pipelineOpts struct {
	backend      string   // discard or tsdb
	stage        string   // the stage's name in the tables; pipeline(<backend>) when empty
	consumerArgs []string // extra ferry-consumer flags
	pusherArgs   []string // extra ferry-pusher flags
	// during, if set, runs once the consumers are started, for as long as
	// the stage runs (profiling, RSS sampling); its context ends with the
	// stage.
	during func(ctx context.Context, cs []*consumerProc, p *pusherProc)
	// untilDuring ends the stage as soon as during returns, without
	// waiting for the backlog to be committed (profiling runs).
	untilDuring bool
	// after, if set, runs once everything is committed and verified,
	// before the processes are stopped (a last look at the pusher).
	after func(ctx context.Context, p *pusherProc)
	// timeout replaces -stage-timeout when set (the scale stage).
	timeout time.Duration
	// pusher, if set, is a running pusher to use instead of starting
	// one; it is left running. Its counters are taken relative to the
	// stage's start, for the checks.
	pusher *pusherProc
}

// runPipeline replays the backlog through ferry-consumer processes (one per
// partition, a fresh consumer group) and a ferry-pusher process. The stage
// ends when the group's committed offsets reach the end offsets.
func (e *env) runPipeline(ctx context.Context, bl *backlog, name string, o pipelineOpts) (res stageResult) {
	res = stageResult{Stage: cmp.Or(o.stage, fmt.Sprintf("pipeline(%s)", o.backend))}
	fail := func(err error) stageResult {
		res.Err = err.Error()
		return res
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(o.timeout, e.cfg.StageTimeout))
	defer cancel()
	ends, err := e.endOffsets(ctx, bl.Topic)
	if err != nil {
		return fail(err)
	}
	p, owned := o.pusher, o.pusher == nil
	var acceptedBase float64 // a running pusher's count so far
	if owned {
		if p, err = e.startPusher(ctx, name+"-pusher", o.backend, o.pusherArgs...); err != nil {
			return fail(err)
		}
	} else {
		m, err := scrape(ctx, p.httpAddr)
		if err != nil {
			return fail(err)
		}
		acceptedBase = m.sum("ferry_pusher_samples_total", map[string]string{"outcome": "accepted"})
	}
	var cs []*consumerProc
	defer func() {
		if err := stopAll(cs, cond(owned, p, nil)); err != nil && res.Err == "" {
			res.Err = "stopping: " + err.Error()
		}
	}()
	pu0 := p.usage()
	brokerCPU0, harnessCPU0 := e.brokerCPU(), selfCPU()
	group := fmt.Sprintf("bench-%s-%08x", name, rand.Uint32())
	start := time.Now()
	cs, err = e.startConsumers(ctx, name, bl.Topic, group, p.grpcAddr, bl.Shape.Partitions, o.consumerArgs...)
	if err != nil {
		return fail(err)
	}
	duringCtx, stopDuring := context.WithCancel(ctx)
	duringDone := make(chan struct{})
	go func() {
		defer close(duringDone)
		if o.during != nil {
			o.during(duringCtx, cs, p)
		}
	}()
	defer func() { stopDuring(); <-duringDone }()

	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var steady steadyWindow
	for {
		if res.LastAck == 0 && !o.untilDuring {
			// When every record was answered OK: the commit that ends the
			// stage follows within -kafka.commit-interval.
			if ok, err := acked(ctx, cs); err == nil {
				steady.observe(time.Since(start), ok, float64(bl.Records), func() cpuSplit { return e.cpuNow(p, cs) })
				if ok >= float64(bl.Records) {
					res.LastAck = time.Since(start)
				}
			}
		}
		done, _, err := e.committedReached(ctx, group, bl.Topic, ends)
		if err != nil {
			return fail(fmt.Errorf("waiting for commits: %w", err))
		}
		if done {
			break
		}
		if o.untilDuring {
			select {
			case <-duringDone:
				res.Elapsed = time.Since(start)
				return res
			default:
			}
		}
		for _, c := range append([]*child{p.child}, childrenOf(cs)...) {
			if c.exited() {
				return fail(fmt.Errorf("%s exited: %w", c.name, c.exitErr()))
			}
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return fail(errors.New("interrupted"))
			}
			_, behind, _ := e.committedReached(context.Background(), group, bl.Topic, ends)
			return fail(fmt.Errorf("not all committed within -stage-timeout (%d records behind): %w", behind, ctx.Err()))
		case <-tick.C:
		}
	}
	res.Elapsed = time.Since(start)
	stopDuring()
	<-duringDone
	res.Records, res.Bytes, res.Samples = bl.Records, bl.Bytes, bl.Samples
	res.SteadyRecords, res.Steady = steady.result()
	res.BrokerCPU = e.brokerCPU() - brokerCPU0
	res.HarnessCPU = selfCPU() - harnessCPU0
	pu := p.usage()
	res.PusherCPU, res.PusherPeakRSS = pu.CPU-pu0.CPU, pu.PeakRSS
	res.PusherFaults = pu.MinorFaults - pu0.MinorFaults
	for _, c := range cs {
		u := c.usage()
		res.ConsumerCPU += u.CPU
		res.ConsumerFaults += u.MinorFaults
		res.ConsumerPeakRSS = max(res.ConsumerPeakRSS, u.PeakRSS)
		res.Consumers++
	}
	res.WholeCPU = res.totalCPU()
	if cpu, ok := steady.cpu(); ok {
		res.HarnessCPU, res.ConsumerCPU, res.PusherCPU, res.BrokerCPU = cpu.Harness, cpu.Consumers, cpu.Pusher, cpu.Broker
		res.SteadyCPU = true
	}
	vbl := *bl // the pusher's count includes what it accepted before the stage
	vbl.Samples += int64(acceptedBase)
	res.Check = e.verify(ctx, &vbl, cs, p)
	if o.after != nil {
		o.after(ctx, p)
	}
	if m, err := scrape(ctx, p.httpAddr); err == nil {
		if h := m.histogram("ferry_pusher_sync_duration_seconds"); h.count > 0 && o.backend == "tsdb" {
			res.Syncs, res.SyncMean = h.count, h.sum/h.count
			res.Info = fmt.Sprintf("%.0f pusher Syncs, mean %s", h.count, fmtSeconds(h.sum/h.count))
		}
		if h := m.histogram("ferry_pusher_batch_requests"); h.count > 0 {
			res.Info = strings.TrimPrefix(res.Info+fmt.Sprintf("; applies of %.2f requests on average", h.sum/h.count), "; ")
		}
		// Requests per PushBatch message, counted by gRPC's metrics; none
		// on Push streams, whose messages are one request each.
		if msgs := m.sum("ferry_pusher_grpc_server_msg_received_total", map[string]string{"grpc_method": "PushBatch"}); msgs > 0 {
			reqs := m.sum("ferry_pusher_requests_total", nil)
			sent := m.sum("ferry_pusher_grpc_server_msg_sent_total", map[string]string{"grpc_method": "PushBatch"})
			res.Info += fmt.Sprintf("; %.1f requests and %.1f answers per stream message", reqs/msgs, reqs/max(sent, 1))
		}
	}
	return res
}

// pollEvery is how often a pipeline stage reads its progress (the
// consumers' /metrics) and the group's commits. Each poll costs the
// measured consumers a scrape, so it is no more often than the steady
// window, now seconds long, needs: 50 ms cost them 8-10% of their CPU.
const pollEvery = 100 * time.Millisecond

// acked is the records the consumers got an OK answer for. Progress is
// read from the consumers, not the pusher under test, because this is
// polled every pollEvery and a TSDB pusher's /metrics sums the metrics of
// every open tenant's TSDB: at 1,000 tenants the polling alone took a
// large share of the pusher's CPU.
func acked(ctx context.Context, cs []*consumerProc) (float64, error) {
	var ok float64
	for _, c := range cs {
		m, err := scrape(ctx, c.httpAddr)
		if err != nil {
			return 0, err
		}
		ok += m.sum("ferry_consumer_acks_total", map[string]string{"status": "ok"})
	}
	return ok, nil
}

func childrenOf(cs []*consumerProc) []*child {
	out := make([]*child, len(cs))
	for i, c := range cs {
		out[i] = c.child
	}
	return out
}

// verify checks the pusher accepted every sample exactly and the consumers
// skipped nothing; it returns "" when all is well, else what is off
// (duplicates from retries are allowed and reported).
func (e *env) verify(ctx context.Context, bl *backlog, cs []*consumerProc, p *pusherProc) string {
	var notes []string
	pm, err := scrape(ctx, p.httpAddr)
	if err != nil {
		return "cannot scrape the pusher: " + err.Error()
	}
	accepted := int64(pm.sum("ferry_pusher_samples_total", map[string]string{"outcome": "accepted"}))
	rejected := int64(pm.sum("ferry_pusher_samples_total", map[string]string{"outcome": "rejected"}))
	switch {
	case accepted < bl.Samples:
		notes = append(notes, fmt.Sprintf("pusher accepted %d of %d samples", accepted, bl.Samples))
	case accepted > bl.Samples:
		notes = append(notes, fmt.Sprintf("pusher accepted %d samples for %d (redelivered)", accepted, bl.Samples))
	}
	if rejected > 0 {
		notes = append(notes, fmt.Sprintf("pusher rejected %d samples", rejected))
	}
	var skipped, retries float64
	for _, c := range cs {
		cm, err := scrape(ctx, c.httpAddr)
		if err != nil {
			return errors.Join(errors.New("cannot scrape "+c.name), err).Error()
		}
		skipped += cm.sum("ferry_consumer_skipped_records_total", nil)
		retries += cm.sum("ferry_consumer_retries_total", nil)
	}
	if skipped > 0 {
		notes = append(notes, fmt.Sprintf("consumers skipped %.0f records", skipped))
	}
	if retries > 0 {
		notes = append(notes, fmt.Sprintf("consumers retried %.0f requests", retries))
	}
	return strings.Join(notes, "; ")
}

// steadyWindow finds the steady part of a replay from scrapes of the
// pusher's OK count: from the first scrape at or past 10 % of the backlog
// to the first at or past 90 %. It also keeps the CPU the processes had
// used at both ends, when it is given a way to read it, so that CPU per
// sample is taken over the same window as the rate.
type steadyWindow struct {
	t10, t90     time.Duration
	n10, n90     float64
	cpu10, cpu90 *cpuSplit
}

// observe notes a scrape: at is when, ok the records acknowledged, total
// the backlog's. cpuNow, which may be nil, is called at the window's ends.
func (w *steadyWindow) observe(at time.Duration, ok, total float64, cpuNow func() cpuSplit) {
	if w.t10 == 0 && ok >= 0.1*total {
		w.t10, w.n10 = at, ok
		w.cpu10 = readSplit(cpuNow)
	}
	if w.t90 == 0 && ok >= 0.9*total {
		w.t90, w.n90 = at, ok
		w.cpu90 = readSplit(cpuNow)
	}
}

func readSplit(cpuNow func() cpuSplit) *cpuSplit {
	if cpuNow == nil {
		return nil
	}
	c := cpuNow()
	return &c
}

// result returns the records and time of the window, zeros when the
// scrapes did not see both ends apart (a backlog replayed within one poll).
func (w *steadyWindow) result() (int64, time.Duration) {
	if w.t90 <= w.t10 || w.n90 <= w.n10 {
		return 0, 0
	}
	return int64(w.n90 - w.n10), w.t90 - w.t10
}

// cpu returns the CPU used over the window, false when the window or a
// reading at one of its ends is missing.
func (w *steadyWindow) cpu() (cpuSplit, bool) {
	if _, d := w.result(); d == 0 || w.cpu10 == nil || w.cpu90 == nil {
		return cpuSplit{}, false
	}
	return w.cpu90.minus(*w.cpu10), true
}

// cpuSplit is the CPU time used so far by each kind of process of a stage.
type cpuSplit struct {
	Harness, Consumers, Pusher, Broker time.Duration
}

func (c cpuSplit) minus(o cpuSplit) cpuSplit {
	return cpuSplit{c.Harness - o.Harness, c.Consumers - o.Consumers, c.Pusher - o.Pusher, c.Broker - o.Broker}
}

// cpuNow reads the CPU used so far by the harness, the broker, the pusher
// and every consumer.
func (e *env) cpuNow(p *pusherProc, cs []*consumerProc) cpuSplit {
	c := cpuSplit{Harness: selfCPU(), Broker: e.brokerCPU(), Pusher: p.usage().CPU}
	for _, cp := range cs {
		c.Consumers += cp.usage().CPU
	}
	return c
}
