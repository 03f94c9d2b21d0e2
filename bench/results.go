package main

import (
	"math"
	"slices"
	"time"
)

// Names of the stages of a shape, as the tables show them.
const (
	stageConsume         = "consume"
	stageDecode          = "consume+decode"
	stagePipelineDiscard = "pipeline(discard)"
	stagePipelineTSDB    = "pipeline(tsdb)"
	// stagePipelineShared is pipeline(tsdb) with the pusher's shared
	// tenancy: one TSDB for every tenant, the tenant a label of each
	// series, where the default keeps a TSDB per tenant. It runs only on
	// the shapes of targets 1 and 2 (runsSharedTenancy).
	stagePipelineShared = "pipeline(tsdb, shared)"
)

// flagTenancyShared is what stagePipelineShared adds to the pusher's flags.
const flagTenancyShared = "-storage.tenancy=shared"

// stageResult is one measured stage on one backlog.
type stageResult struct {
	Stage string
	// Round is the round of a stage repeated -rounds times (1, 2, ...), 0
	// for a stage run once per shape (consume, the simple loop).
	Round   int
	Records int64
	Samples int64
	Bytes   int64
	Elapsed time.Duration
	LastAck time.Duration // pipelines: when the pusher had answered every record OK
	// Pipelines: the records acknowledged OK between the scrapes that first
	// saw 10 % and 90 % of the backlog acknowledged, and the time between
	// them: the steady-state rate, without the start of the processes and
	// the wait for the final commit.
	SteadyRecords int64
	Steady        time.Duration
	Passes        int // consume ceilings: times the backlog was read

	// CPU by kind of process, over the window records/s is taken over:
	// the steady window when SteadyCPU, the whole stage otherwise.
	HarnessCPU  time.Duration // the in-process work of the ceilings
	ConsumerCPU time.Duration // all consumer processes
	PusherCPU   time.Duration
	BrokerCPU   time.Duration // a broker we started; 0 otherwise
	// SteadyCPU says the CPU above is the steady window's (pipelines):
	// starting processes, opening tenants and growing a fresh heap,
	// fixed costs that belong to the backlog's start, are then outside
	// it as they are outside the rate.
	SteadyCPU bool
	// WholeCPU is every process's CPU over the whole stage.
	WholeCPU time.Duration

	Consumers       int
	ConsumerPeakRSS int64 // the largest consumer's VmHWM
	PusherPeakRSS   int64
	// Minor page faults over the stage: the memory the processes took
	// from the kernel, which costs CPU (zeroing pages) besides RSS.
	ConsumerFaults int64 // all consumer processes
	PusherFaults   int64

	// The pusher's Sync calls (tsdb pipelines): how many, and their mean
	// duration in seconds.
	Syncs    float64
	SyncMean float64

	// Load is the 1-minute load average when the stage started: a round
	// run while the shared machine was busy shows here.
	Load string
	// Reference is referenceWork's time just before the stage: how fast
	// the shared machine ran the same code then.
	Reference time.Duration

	Check string // what verification found off, "" if nothing
	Info  string // facts worth a note (the pusher's Sync calls)
	Err   string
}

func (s stageResult) ok() bool { return s.Err == "" && s.Elapsed > 0 }

// recordsPerSec is the steady-state rate of a pipeline, the whole-stage
// rate otherwise.
func (s stageResult) recordsPerSec() float64 {
	if s.SteadyRecords > 0 && s.Steady > 0 {
		return perSec(float64(s.SteadyRecords), s.Steady)
	}
	return s.wholeRecordsPerSec()
}

// wholeRecordsPerSec is the rate over the whole stage: for a pipeline, from
// starting the consumers to the final commit.
func (s stageResult) wholeRecordsPerSec() float64 { return perSec(float64(s.Records), s.Elapsed) }

func (s stageResult) samplesPerSec() float64 { return s.perRecord(s.Samples) }
func (s stageResult) mbPerSec() float64      { return s.perRecord(s.Bytes) / 1e6 }

// perRecord scales recordsPerSec to n units over the backlog's records.
func (s stageResult) perRecord(n int64) float64 {
	if s.Records == 0 {
		return math.NaN()
	}
	return s.recordsPerSec() * float64(n) / float64(s.Records)
}

// cpuPerMSamples is CPU seconds per million samples, cpu being one of the
// stage's CPU figures (over the steady window when SteadyCPU).
func (s stageResult) cpuPerMSamples(cpu time.Duration) float64 {
	samples := float64(s.Samples)
	if s.SteadyCPU && s.Records > 0 {
		samples *= float64(s.SteadyRecords) / float64(s.Records)
	}
	if samples == 0 || cpu == 0 {
		return math.NaN()
	}
	return cpu.Seconds() / (samples / 1e6)
}

// wholeCPUPerMSamples is every process's CPU per million samples over the
// whole stage.
func (s stageResult) wholeCPUPerMSamples() float64 {
	if s.Samples == 0 || s.WholeCPU == 0 {
		return math.NaN()
	}
	return s.WholeCPU.Seconds() / (float64(s.Samples) / 1e6)
}

func perSec(n float64, d time.Duration) float64 {
	if d <= 0 {
		return math.NaN()
	}
	return n / d.Seconds()
}

// totalCPU is the CPU of every process the stage measured.
func (s stageResult) totalCPU() time.Duration {
	return s.HarnessCPU + s.ConsumerCPU + s.PusherCPU + s.BrokerCPU
}

// shapeResult is every stage of one shape.
type shapeResult struct {
	Shape   Shape
	Backlog *backlog
	Stages  []stageResult
	Err     string
}

// rounds is how many rounds the shape's repeated stages ran.
func (r *shapeResult) rounds() int {
	n := 0
	for _, s := range r.Stages {
		n = max(n, s.Round)
	}
	return n
}

// inRound returns the named stage of a round; a stage run once per shape
// (round 0) stands for itself in every round.
func (r *shapeResult) inRound(round int, name string) (stageResult, bool) {
	for _, s := range r.Stages {
		if s.Stage == name && (s.Round == round || s.Round == 0) {
			return s, s.ok()
		}
	}
	return stageResult{}, false
}

// ratios is stage a's records/s over stage b's in every round both ran
// (byCPU false), or the ratio their CPU per sample predicts (byCPU true).
func (r *shapeResult) ratios(a, b string, byCPU bool) []float64 {
	var out []float64
	for round := 1; round <= max(1, r.rounds()); round++ {
		sa, oka := r.inRound(round, a)
		sb, okb := r.inRound(round, b)
		if !oka || !okb {
			continue
		}
		if byCPU {
			out = append(out, cpuRatio(sa, sb))
		} else {
			out = append(out, sa.recordsPerSec()/sb.recordsPerSec())
		}
	}
	return out
}

// ran reports whether the named stage ran on the shape, well or not.
func (r *shapeResult) ran(name string) bool {
	return slices.ContainsFunc(r.Stages, func(s stageResult) bool { return s.Stage == name })
}

// each is f of the named stage in every round it ran successfully.
func (r *shapeResult) each(name string, f func(stageResult) float64) []float64 {
	var out []float64
	for _, s := range r.Stages {
		if s.Stage == name && s.ok() {
			out = append(out, f(s))
		}
	}
	return out
}

// cpuRatio is b's total CPU per sample over a's: the throughput ratio a/b
// that CPU alone predicts on a CPU-bound machine. It is less sensitive
// than throughput to other load on a shared machine.
func cpuRatio(a, b stageResult) float64 {
	return b.cpuPerMSamples(b.totalCPU()) / a.cpuPerMSamples(a.totalCPU())
}

// spread summarises the rounds of one figure: the median, which one slow
// round cannot move, and the range, which says how far to trust it.
type spread struct {
	Median, Min, Max float64
	N                int // rounds measured; 0 means not measured
}

// summarize returns the spread of xs, ignoring NaNs.
func summarize(xs []float64) spread {
	var v []float64
	for _, x := range xs {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return spread{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	slices.Sort(v)
	n := len(v)
	med := v[n/2]
	if n%2 == 0 {
		med = (v[n/2-1] + v[n/2]) / 2
	}
	return spread{Median: med, Min: v[0], Max: v[n-1], N: n}
}

// latencyResult is the produce-to-ack run at a fixed rate.
type latencyResult struct {
	Shape        Shape
	Capacity     float64 // pipeline(discard) records/s the rate is derived from
	Fraction     float64 // of Capacity
	Rate         float64 // target records/s
	Produced     int64   // records produced in the window
	Acked        float64 // acknowledgements observed in the window
	Window       time.Duration
	Observations float64
	P50, P90     float64 // seconds
	P99, P999    float64
	P99Lo, P99Hi float64 // bucket bounds around the p99 estimate
	// Native is set when the quantiles come from the native buckets
	// (about 4.4% wide) rather than the classic ones (25% wide).
	Native      bool
	Mean        float64
	ConsumerCPU time.Duration
	PusherCPU   time.Duration
	HarnessCPU  time.Duration // producer and reference consumer
	BrokerCPU   time.Duration
	// Exact references from the harness: Produce to the broker's ack, and
	// Produce to a plain franz-go consumer's poll returning the record.
	ProduceAck latencySummary
	KafkaFetch latencySummary
	Err        string
}

// replayResult is the consumer's memory while replaying a large backlog.
type replayResult struct {
	Backlog         *backlog
	Stage           stageResult
	MaxSampledRSS   int64 // the largest VmRSS seen by sampling every 100 ms
	MaxHeapInuse    float64
	ConsumerFlags   string
	ProduceDuration time.Duration
	Err             string
}

// fairnessResult compares the other tenants' progress with and without a
// fault on one tenant.
type fairnessResult struct {
	Shape         Shape
	FaultTenant   string
	Delay, Length time.Duration
	Bucket        time.Duration

	Baseline, Faulted timeline

	// Records/s in the fault window of the other tenants of the faulty
	// tenant's partition (Same) and of the other partitions (Other), with
	// and without the fault.
	SameBaseline, SameFaulted   float64
	OtherBaseline, OtherFaulted float64
	SameTotal                   int64   // records of the same-partition others
	SameMinRate                 float64 // their slowest bucket from the fault on, while pending
	StallBuckets                int     // buckets from the fault on without their progress while pending
	StallAfter                  time.Duration
	FaultedRetries              float64
	Sizing                      []string // how the backlog was grown to outlast the fault window
	Note                        string
	Err                         string
}

// profileResult is a perf profile of one pipeline run.
type profileResult struct {
	Backend  string
	Shape    Shape
	Duration time.Duration
	Consumer []profileEntry
	Pusher   []profileEntry
	// Children (inclusive) view: where the time goes, by caller.
	ConsumerInclusive []profileEntry
	PusherInclusive   []profileEntry
	Err               string
}

type profileEntry struct {
	Percent float64
	Symbol  string
}

// microResult is the output of the Go micro-benchmarks.
type microResult struct {
	Command string
	Lines   []string
	Err     string
}

// normalized is the same-partition others' rate ratio (fault / no fault)
// divided by the other partitions' ratio: the change the fault caused,
// with the machine's change in speed between the two runs taken out.
func (f *fairnessResult) normalized() float64 {
	if f.SameBaseline == 0 || f.OtherBaseline == 0 || f.OtherFaulted == 0 {
		return math.NaN()
	}
	return (f.SameFaulted / f.SameBaseline) / (f.OtherFaulted / f.OtherBaseline)
}
