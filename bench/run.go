package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/kafkatest"
)

// report is everything one run measured.
type report struct {
	Command           string
	Started, Finished time.Time
	LoadStart         string
	LoadEnd           string
	// CPUShares is what happened to the machine's CPU between the start
	// and the end, "" where /proc/stat cannot be read.
	CPUShares string
	// RefStart and RefEnd time referenceWork at the start and the end.
	RefStart, RefEnd time.Duration
	Machine          machine
	Broker           string
	BrokerKind       string
	Compression      string
	Code             string
	Shapes           []*shapeResult
	Latency          []latencyResult
	Replay           *replayResult
	Fairness         *fairnessResult
	Scale            []scaleResult
	Shards           []shardsResult
	Profiles         []profileResult
	Micro            *microResult
	Gateway          *gatewayResult
	RemoteWrite      *rwResult
	Errors           []string
	cfg              Config
}

func (r *report) fail(stage string, err string) {
	if err != "" {
		r.Errors = append(r.Errors, stage+": "+err)
	}
}

// run executes the benchmark and returns the exit code.
func run(ctx context.Context, cfg Config, stdout, stderr io.Writer) int {
	logf := func(format string, args ...any) {
		fmt.Fprintf(stderr, "bench: %s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	rep := &report{
		cfg: cfg, Started: time.Now(), LoadStart: loadAvg(), Machine: readMachine(),
		Command: "go run ./bench " + strings.Join(quoteArgs(cfg.Args), " "), Compression: cfg.Compression,
	}
	rep.Command = strings.TrimSpace(rep.Command)
	rep.RefStart = referenceWork(runReferenceN, runReferenceRepeats)
	cpuStart, cpuOK := readCPUTimes()
	defer procs.killAll()

	root, err := kafkatest.ModuleRoot()
	if err != nil {
		logf("%v", err)
		return 2
	}
	work, err := os.MkdirTemp("", "ferry-bench-")
	if err != nil {
		logf("%v", err)
		return 2
	}
	e := &env{cfg: cfg, root: root, work: work, logDir: filepath.Join(work, "logs"), logf: logf,
		kafkaSide: &kafkaSide{compression: cfg.Compression}}
	if err := os.MkdirAll(e.logDir, 0o750); err != nil {
		logf("%v", err)
		return 2
	}
	defer func() {
		if cfg.KeepWork || len(rep.Errors) > 0 {
			logf("work directory kept: %s (child logs in %s)", work, e.logDir)
			return
		}
		_ = os.RemoveAll(work)
	}()

	logf("building ferry-consumer and ferry-pusher into %s", cfg.BinDir)
	if err := e.build(ctx); err != nil {
		logf("%v", err)
		rep.fail("build", err.Error())
		return 1
	}
	b, err := startBroker(ctx, root, work, logf)
	if err != nil {
		logf("%v", err)
		rep.fail("broker", err.Error())
		return 1
	}
	defer b.stop()
	e.broker = b
	rep.Broker, rep.BrokerKind, rep.Code = b.Describe(), b.kind, e.codeVersion
	logf("kafka: %s", rep.Broker)
	e.kcl, err = kgo.NewClient(kgo.SeedBrokers(b.addrs...), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		logf("%v", err)
		return 1
	}
	defer e.kcl.Close()
	e.adm = kadm.NewClient(e.kcl)
	defer e.deleteTopics()
	if err := e.warmGroups(ctx); err != nil {
		logf("%v", err)
		rep.fail("broker", err.Error())
		return 1
	}

	e.runStages(ctx, rep)

	rep.Finished, rep.LoadEnd = time.Now(), loadAvg()
	if end, ok := readCPUTimes(); ok && cpuOK {
		rep.CPUShares = cpuShares(cpuStart, end)
	}
	rep.RefEnd = referenceWork(runReferenceN, runReferenceRepeats)
	md := rep.markdown()
	fmt.Fprintln(stdout, md)
	if ctx.Err() != nil {
		logf("interrupted: %s not written", cfg.Out)
		return 130
	}
	if cfg.Out != "" {
		out := cfg.Out
		if !filepath.IsAbs(out) {
			out = filepath.Join(root, out)
		}
		if err := writeReport(out, md); err != nil {
			logf("writing %s: %v", out, err)
			return 1
		}
		logf("results written to %s", out)
	}
	for _, err := range rep.Errors {
		logf("error: %s", err)
	}
	if len(rep.Errors) > 0 {
		return 1
	}
	return 0
}

// pause lets the machine settle between stages (GC, page cache, the
// broker's background work), so one stage's tail does not bill the next.
func pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(2 * time.Second):
	}
}

func (e *env) runStages(ctx context.Context, rep *report) {
	cfg := e.cfg
	backlogs := map[string]*backlog{}
	if cfg.Stages[stageShapes] {
		for _, sh := range cfg.Shapes {
			if ctx.Err() != nil {
				return
			}
			r := &shapeResult{Shape: sh}
			rep.Shapes = append(rep.Shapes, r)
			e.logf("shape %s: producing %d records", sh.Label(), sh.Records)
			bl, err := e.produceBacklog(ctx, sh.Name(), sh, 0)
			if err != nil {
				r.Err = err.Error()
				rep.fail("shape "+sh.Label(), r.Err)
				continue
			}
			r.Backlog, backlogs[backlogKey(sh)] = bl, bl
			e.logf("shape %s: %d records, %.1f MB of values (%.0f B/record) produced in %s", sh.Label(), bl.Records,
				float64(bl.Bytes)/1e6, float64(bl.Bytes)/float64(bl.Records), bl.Took.Round(100*time.Millisecond))
			e.runShape(ctx, rep, r, bl)
		}
	}
	backlogFor := func(sh Shape, what string) *backlog {
		if bl := backlogs[backlogKey(sh)]; bl != nil {
			return bl
		}
		e.logf("%s: producing a %s backlog of %d records", what, sh.Label(), sh.Records)
		bl, err := e.produceBacklog(ctx, what+"-"+sh.Name(), sh, 0)
		if err != nil {
			rep.fail(what, err.Error())
			return nil
		}
		backlogs[backlogKey(sh)] = bl
		return bl
	}
	if cfg.Stages[stageLatency] && ctx.Err() == nil {
		capacity := cfg.LatencyCapacity
		for _, r := range rep.Shapes {
			if capacity > 0 {
				break
			}
			if r.Shape.Name() == cfg.LatencyShape.Name() {
				if m := summarize(r.each(stagePipelineDiscard, stageResult.recordsPerSec)); m.N > 0 {
					capacity = m.Median
				}
			}
		}
		if capacity == 0 {
			if bl := backlogFor(cfg.LatencyShape, "capacity"); bl != nil {
				pause(ctx)
				s := e.runPipeline(ctx, bl, "capacity-"+bl.Shape.Name(), pipelineOpts{backend: "discard"})
				rep.fail("latency capacity", s.Err)
				if s.ok() {
					capacity = s.recordsPerSec()
				}
			}
		}
		for _, f := range cfg.LatencyFractions {
			if ctx.Err() != nil {
				break
			}
			pause(ctx)
			e.logf("latency: %s at %.0f records/s (%.0f%% of %.0f)", cfg.LatencyShape.Label(), capacity*f, f*100, capacity)
			l := e.measureLatency(ctx, cfg.LatencyShape, capacity, f)
			rep.Latency = append(rep.Latency, l)
			rep.fail(fmt.Sprintf("latency at %.0f%%", f*100), l.Err)
			e.logf("latency: p50 %s p99 %s (%.0f observations)", fmtSeconds(l.P50), fmtSeconds(l.P99), l.Observations)
		}
	}
	if cfg.Stages[stageFairness] && ctx.Err() == nil {
		sh := cfg.FaultShape
		if r := rep.shape(sh.Name()); r != nil {
			// Enough records for the fault-free replay to outlast the
			// fault window at the rate measured for this shape, with a
			// margin; measureFairness grows the backlog if it still
			// finishes early.
			if m := summarize(r.each(stagePipelineDiscard, stageResult.recordsPerSec)); m.N > 0 {
				sh.Records = fairnessRecords(sh.Records, m.Max, cfg.FaultDelay+cfg.FaultDuration)
			}
		}
		if bl := backlogFor(sh, "fairness"); bl != nil {
			pause(ctx)
			f := e.measureFairness(ctx, bl)
			rep.Fairness = &f
			rep.fail("fairness", f.Err)
			e.logf("fairness: %s's partition's other tenants %.0f records/s during the fault vs %.0f without; %d stalled buckets",
				f.FaultTenant, f.SameFaulted, f.SameBaseline, f.StallBuckets)
		}
	}
	if cfg.Stages[stageScale] && ctx.Err() == nil {
		rep.Scale = e.measureScale(ctx)
		for _, s := range rep.Scale {
			rep.fail("scale "+s.label(), s.Err)
		}
	}
	if cfg.Stages[stageShards] && ctx.Err() == nil {
		rep.Shards = e.measureShards(ctx)
		for _, s := range rep.Shards {
			rep.fail(fmt.Sprintf("shards %d %s", s.Size, s.Backend), s.Err)
		}
	}
	if cfg.Stages[stageProfile] && ctx.Err() == nil {
		if bl := backlogFor(cfg.ProfileShape, "profile"); bl != nil {
			for _, backend := range []string{"discard", "tsdb"} {
				pause(ctx)
				e.logf("profile: pipeline(%s) of %s under perf", backend, bl.Shape.Label())
				p := e.profilePipeline(ctx, bl, backend)
				rep.Profiles = append(rep.Profiles, p)
				rep.fail("profile "+backend, p.Err)
			}
		}
	}
	if cfg.Stages[stageReplay] && ctx.Err() == nil {
		pause(ctx)
		r := e.measureReplay(ctx)
		rep.Replay = &r
		rep.fail("replay", r.Err)
		e.logf("replay: consumer peak RSS %s, %s", fmtBytes(r.Stage.ConsumerPeakRSS), r.Stage.summary())
	}
	if cfg.Stages[stageGateway] && ctx.Err() == nil {
		g := gatewayStage{e}.measureGateway(ctx)
		rep.Gateway = &g
		rep.fail("gateway", g.Err)
	}
	if cfg.Stages[stageRemoteWrite] && ctx.Err() == nil {
		rw := e.measureRemoteWrite(ctx)
		rep.RemoteWrite = &rw
		rep.fail("remote-write", rw.Err)
	}
	if cfg.Stages[stageMicro] && ctx.Err() == nil {
		e.deleteTopics() // free the broker's disk and page cache first
		e.logf("micro-benchmarks: %s", strings.Join(microPackages, " "))
		m := e.runMicro(ctx)
		rep.Micro = &m
		rep.fail("micro", m.Err)
	}
}

// plannedStage is one stage of a shape's plan: its name and its round (0
// for a stage run once per shape).
type plannedStage struct {
	Stage string
	Round int
}

// shapePlan is the order of a shape's stages: the consume ceiling once,
// then rounds rounds of consume+decode, pipeline(discard), pipeline(tsdb)
// and, on the shapes of targets 1 and 2, pipeline(tsdb, shared), every
// other round in reverse order so that a machine getting slower or faster
// during the run does not favour one stage, and the simple loop once after
// the first round.
func shapePlan(sh Shape, rounds int) []plannedStage {
	plan := []plannedStage{{stageConsume, 0}}
	for round := 1; round <= rounds; round++ {
		order := []plannedStage{{stageDecode, round}, {stagePipelineDiscard, round}, {stagePipelineTSDB, round}}
		if runsSharedTenancy(sh) {
			// Next to pipeline(tsdb), so that the reversed rounds move it
			// with the stage it is compared to.
			order = append(order, plannedStage{stagePipelineShared, round})
		}
		if round%2 == 0 {
			slices.Reverse(order)
		}
		plan = append(plan, order...)
		if round == 1 {
			plan = append(plan, plannedStage{stageSimpleLoop, 0})
		}
	}
	return plan
}

// runsSharedTenancy says whether a shape also runs pipeline(tsdb, shared):
// only the shapes of targets 1 and 2, where the TSDB's cost per tenant
// matters, so the run grows by a stage per round on two shapes only.
func runsSharedTenancy(sh Shape) bool {
	return sh.Name() == shapeManyTenants || sh.Name() == shapeBigRecords
}

// The reference work's sizes, decodes and repeats: a run's start and end,
// and before each stage of a shape, where it must be short (about 2 ms a
// repeat here).
const (
	runReferenceN, runReferenceRepeats     = 2000, 5
	stageReferenceN, stageReferenceRepeats = 400, 3
)

// runShape runs the stages of one shape on its backlog, in shapePlan's
// order.
func (e *env) runShape(ctx context.Context, rep *report, r *shapeResult, bl *backlog) {
	sh := bl.Shape
	for _, st := range shapePlan(sh, e.cfg.Rounds) {
		if ctx.Err() != nil {
			return
		}
		pause(ctx)
		load := strings.Fields(loadAvg())[0]
		ref := referenceWork(stageReferenceN, stageReferenceRepeats)
		s := e.runPlanned(ctx, bl, st)
		s.Round, s.Load, s.Reference = st.Round, load, ref
		r.Stages = append(r.Stages, s)
		name := s.Stage
		if s.Round > 0 {
			name = fmt.Sprintf("%s #%d", s.Stage, s.Round)
		}
		rep.fail(fmt.Sprintf("shape %s %s", sh.Label(), name), s.Err)
		e.logf("shape %s %-20s %s", sh.Label(), name, s.summary())
	}
}

// runPlanned runs one stage of a shape's plan.
func (e *env) runPlanned(ctx context.Context, bl *backlog, st plannedStage) stageResult {
	name := func(prefix string) string { return fmt.Sprintf("%s-%s-r%d", prefix, bl.Shape.Name(), st.Round) }
	switch st.Stage {
	case stageConsume:
		return e.consumeCeiling(ctx, bl, false)
	case stageDecode:
		return e.consumeCeiling(ctx, bl, true)
	case stagePipelineDiscard:
		return e.runPipeline(ctx, bl, name("discard"), pipelineOpts{backend: "discard"})
	case stagePipelineTSDB:
		return e.runPipeline(ctx, bl, name("tsdb"), pipelineOpts{backend: "tsdb"})
	case stagePipelineShared:
		return e.runPipeline(ctx, bl, name("tsdb-shared"),
			pipelineOpts{backend: "tsdb", stage: stagePipelineShared, pusherArgs: []string{flagTenancyShared}})
	case stageSimpleLoop:
		return e.runSimpleLoop(ctx, bl)
	}
	return stageResult{Stage: st.Stage, Err: "no such stage"}
}

func (s stageResult) summary() string {
	if s.Err != "" {
		return "FAILED: " + s.Err
	}
	out := fmt.Sprintf("%9.0f records/s %11.0f samples/s %7.1f MB/s in %s", s.recordsPerSec(), s.samplesPerSec(), s.mbPerSec(), s.Elapsed.Round(10*time.Millisecond))
	if s.Check != "" {
		out += " (" + s.Check + ")"
	}
	return out
}

// writeFile writes s to path; a new file is world-readable, like the rest
// of docs/.
func writeFile(path, s string) error {
	return os.WriteFile(path, []byte(s), 0o644) //nolint:gosec // documentation and logs, nothing secret
}

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

// backlogKey names a backlog by shape and record count, so stages that ask
// for the same one share it.
func backlogKey(sh Shape) string { return fmt.Sprintf("%s:%d", sh.Name(), sh.Records) }
