package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Shape is one workload: a topic of Partitions partitions holding Records
// records, spread round-robin over Tenants tenants, each record a
// remote-write request of Series series with one sample each.
type Shape struct {
	Partitions int
	Tenants    int
	Series     int
	Records    int
}

// Name is the shape without its record count, as "4x100x100".
func (s Shape) Name() string {
	return fmt.Sprintf("%dx%dx%d", s.Partitions, s.Tenants, s.Series)
}

// Label is the shape for tables: "(4,100,100)".
func (s Shape) Label() string {
	return fmt.Sprintf("(%d,%d,%d)", s.Partitions, s.Tenants, s.Series)
}

// Samples is the number of samples of the whole backlog.
func (s Shape) Samples() int64 { return int64(s.Records) * int64(s.Series) }

// parseShape reads "PxTxS" or "PxTxS:records".
func parseShape(s string) (Shape, error) {
	spec, recs, hasRecs := strings.Cut(strings.TrimSpace(s), ":")
	parts := strings.Split(spec, "x")
	if len(parts) != 3 {
		return Shape{}, fmt.Errorf("shape %q: want partitions x tenants x series, like 4x100x100[:records]", s)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v <= 0 {
			return Shape{}, fmt.Errorf("shape %q: %q is not a positive number", s, p)
		}
		n[i] = v
	}
	sh := Shape{Partitions: n[0], Tenants: n[1], Series: n[2]}
	if hasRecs {
		v, err := strconv.Atoi(recs)
		if err != nil || v <= 0 {
			return Shape{}, fmt.Errorf("shape %q: record count %q is not a positive number", s, recs)
		}
		sh.Records = v
	}
	return sh, nil
}

func parseShapes(s string) ([]Shape, error) {
	var out []Shape
	for _, f := range strings.Split(s, ",") {
		if strings.TrimSpace(f) == "" {
			continue
		}
		sh, err := parseShape(f)
		if err != nil {
			return nil, err
		}
		if sh.Records == 0 {
			return nil, fmt.Errorf("-shapes: %q needs a record count (%s:records)", f, sh.Name())
		}
		out = append(out, sh)
	}
	if len(out) == 0 {
		return nil, errors.New("-shapes names no shape")
	}
	return out, nil
}

// Stage names accepted by -stages.
const (
	stageShapes   = "shapes"
	stageLatency  = "latency"
	stageReplay   = "replay"
	stageFairness = "fairness"
	stageProfile  = "profile"
	stageMicro    = "micro"
	stageScale    = "scale"
)

var allStages = []string{stageShapes, stageLatency, stageReplay, stageFairness, stageScale, stageShards, stageProfile, stageMicro, stageGateway, stageRemoteWrite}

// Config is the harness configuration, from flags.
type Config struct {
	ShapesFlag string
	Shapes     []Shape

	StagesFlag string
	Stages     map[string]bool

	Out            string
	BinDir         string
	KeepWork       bool
	Compression    string
	StageTimeout   time.Duration
	CeilingMinTime time.Duration

	LatencyShapeFlag string
	LatencyShape     Shape
	LatencyFractions []float64
	LatencyWarmup    time.Duration
	LatencyDuration  time.Duration
	LatencyLinger    time.Duration
	// LatencyCapacity, when set, is the records/s the latency fractions
	// apply to, instead of a pipeline(discard) capacity measured first.
	LatencyCapacity float64

	ReplayBytes int64

	FaultShapeFlag string
	FaultShape     Shape
	FaultDelay     time.Duration
	FaultDuration  time.Duration

	ProfileShapeFlag string
	ProfileShape     Shape
	ProfileDuration  time.Duration

	MicroBenchtime string

	// Rounds is how often each pipeline stage of a shape runs, interleaved
	// with its ceiling, for the median and spread of every ratio.
	Rounds int
	// Quick is -quick: small sizes everywhere, for a run of minutes.
	Quick bool

	ScaleSeries int

	SimpleLoopMaxTime time.Duration

	PusherArgs   []string
	ConsumerArgs []string
	// Gateway and RemoteWrite are the flags of those stages.
	Gateway     gatewayConfig
	RemoteWrite rwConfig
	Shards      shardsConfig

	// Args are the command-line arguments, for the report.
	Args []string
}

// defaultShapes give pipeline(discard), the fastest pipeline stage, a
// steady window of several seconds on a shared 2-core machine (4-7 s; the
// TSDB stages take two to three times as long); scale them with -shapes.
// With a third of these, the windows were 1.5-3 s, and a pause of the
// shared machine moved one stage of a round by a fifth: two full runs at
// one commit disagreed by 13 points on target 2.
const defaultShapes = "1x1x100:100000,4x100x100:300000,4x1000x10:1000000"

// quickFlags are the values -quick gives flags not set on the command line.
var quickFlags = [][2]string{
	{"shapes", "1x1x100:5000,4x100x100:20000,4x1000x10:40000"},
	{"rounds", "1"},
	{"ceiling-min-time", "1s"},
	{"latency.duration", "8s"},
	{"latency.warmup", "2s"},
	{"replay.bytes", "200000000"},
	{"fairness.shape", "4x100x100:20000"},
	{"fairness.duration", "4s"},
	{"fairness.delay", "1s"},
	{"scale.series", "40000"},
	{"simpleloop.max-time", "15s"},
	{"profile.duration", "3s"},
	{"micro.benchtime", "100ms"},
	{"gateway.rounds", "1"},
	{"gateway.duration", "3s"},
	{"gateway.latency-duration", "4s"},
	{"remote-write.rounds", "1"},
	{"remote-write.steps", "4"},
	{"shards.records", "10000"},
}

// quickSummary describes quickFlags for -h.
var quickSummary = func() string {
	var parts []string
	for _, q := range quickFlags {
		parts = append(parts, "-"+q[0]+"="+q[1])
	}
	return strings.Join(parts, " ")
}()

func parseFlags(args []string, errOut io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() {
		fmt.Fprintf(errOut, "Usage: go run ./bench [flags]\n\n"+
			"Ferry's end-to-end benchmark: real Kafka (FERRY_KAFKA_ADDRESS, else deploy/kafka-local/kafka.sh,\n"+
			"else in-process kfake), ferry-consumer and ferry-pusher as separate processes. Prints markdown\n"+
			"tables and writes them to -out.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&c.ShapesFlag, "shapes", defaultShapes,
		"Workloads, comma-separated partitions x tenants x series : backlog records.")
	fs.StringVar(&c.StagesFlag, "stages", strings.Join(allStages, ","),
		"Parts to run, comma-separated: "+strings.Join(allStages, ", ")+".")
	fs.StringVar(&c.Out, "out", "docs/benchmarks.md",
		"Markdown file whose generated section (between the bench markers) is replaced with the results; empty writes nothing.")
	fs.StringVar(&c.BinDir, "bin-dir", "bin", "Where ferry-consumer and ferry-pusher are built (go build), relative to the module root.")
	fs.BoolVar(&c.KeepWork, "keep-work", false, "Keep the temporary work directory (child logs, TSDB, perf data) instead of deleting it.")
	fs.StringVar(&c.Compression, "compression", "snappy", "Producer batch compression of the backlogs: none, snappy (franz-go's default), lz4, zstd or gzip.")
	fs.DurationVar(&c.StageTimeout, "stage-timeout", 5*time.Minute, "Longest any one stage may take before it fails.")
	fs.DurationVar(&c.CeilingMinTime, "ceiling-min-time", 3*time.Second,
		"The in-process consume ceilings re-read the backlog until at least this long has passed, for a stable figure.")
	fs.StringVar(&c.LatencyShapeFlag, "latency.shape", "4x100x100", "Shape of the produce-to-ack latency run; its pipeline(discard) capacity sets the rate.")
	fractions := fs.String("latency.rate-fractions", "0.5,0.25",
		"Produce rates of the latency runs as fractions of the measured pipeline(discard) records/s, comma-separated; the first is the one the target is checked at.")
	fs.Float64Var(&c.LatencyCapacity, "latency.capacity", 0,
		"Records/s the latency rate fractions apply to; 0 uses the pipeline(discard) capacity of the latency shape, measured by the shapes stage or else first. Set it to run the latency stage alone at rates comparable between runs.")
	fs.DurationVar(&c.LatencyWarmup, "latency.warmup", 3*time.Second, "Load before the latency window starts (not measured).")
	fs.DurationVar(&c.LatencyDuration, "latency.duration", 20*time.Second, "Length of the latency window.")
	fs.DurationVar(&c.LatencyLinger, "latency.linger", 10*time.Millisecond,
		"Producer linger of the latency runs (franz-go's default); the latency counts it, from Produce on. 0 sends every record alone, which costs the broker several times the CPU.")
	fs.Int64Var(&c.ReplayBytes, "replay.bytes", 1<<30, "Bytes of record values in the backlog replayed by one consumer with default flags, for its peak RSS.")
	fs.StringVar(&c.FaultShapeFlag, "fairness.shape", "4x100x100:150000",
		"Shape and records of the fairness backlog (reused from -shapes when the same, else produced); it must last longer than -fairness.delay + -fairness.duration without the fault.")
	fs.DurationVar(&c.FaultDelay, "fairness.delay", 2*time.Second, "When the fault starts, after the first request reaches the pusher.")
	fs.DurationVar(&c.FaultDuration, "fairness.duration", 10*time.Second, "How long tenant-0's requests are answered SERVER_ERROR.")
	fs.StringVar(&c.ProfileShapeFlag, "profile.shape", "4x100x100", "Shape whose pipeline stages are re-run under perf for the CPU profiles.")
	fs.DurationVar(&c.ProfileDuration, "profile.duration", 8*time.Second, "How long perf records each profiled pipeline run.")
	fs.StringVar(&c.MicroBenchtime, "micro.benchtime", "1s", "-benchtime of the Go micro-benchmarks run by the micro stage.")
	fs.IntVar(&c.Rounds, "rounds", 3,
		"Rounds of each shape's consume+decode, pipeline(discard) and pipeline(tsdb) stages (and pipeline(tsdb, shared) on 4x1000x10 and 4x100x100), interleaved; the report gives the median and spread of every ratio.")
	fs.IntVar(&c.ScaleSeries, "scale.series", 1_000_000,
		"Active series the scale stage grows one pusher (tsdb) to, in three variants: √N tenants × √N series, the same with -storage.tenancy=shared, and 1 tenant × N series.")
	fs.DurationVar(&c.SimpleLoopMaxTime, "simpleloop.max-time", time.Minute,
		"The simple loop (the reference row) stops after this long if the backlog is not done; its rate is then over the records it pushed.")
	fs.BoolVar(&c.Quick, "quick", false,
		"A run of about 3 minutes: "+quickSummary+"; flags given explicitly win. Its figures are too small and noisy for the targets.")
	pusherArgs := fs.String("pusher.args", "", "Extra ferry-pusher flags for every pipeline stage, space-separated (for experiments; the targets assume none).")
	consumerArgs := fs.String("consumer.args", "", "Extra ferry-consumer flags for every pipeline stage, space-separated (for experiments; the targets assume none).")
	c.Gateway.register(fs)
	c.RemoteWrite.register(fs)
	c.Shards.register(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	c.Args = args
	if c.Quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, q := range quickFlags {
			if !set[q[0]] {
				if err := fs.Set(q[0], q[1]); err != nil {
					return c, fmt.Errorf("-quick: -%s=%s: %w", q[0], q[1], err)
				}
			}
		}
	}
	if c.Rounds < 1 {
		return c, fmt.Errorf("-rounds must be at least 1, got %d", c.Rounds)
	}
	if c.ScaleSeries < 1 {
		return c, fmt.Errorf("-scale.series must be positive, got %d", c.ScaleSeries)
	}
	c.PusherArgs, c.ConsumerArgs = strings.Fields(*pusherArgs), strings.Fields(*consumerArgs)
	var err error
	if c.Shapes, err = parseShapes(c.ShapesFlag); err != nil {
		return c, err
	}
	c.Stages = map[string]bool{}
	for _, s := range strings.Split(c.StagesFlag, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		known := false
		for _, a := range allStages {
			known = known || a == s
		}
		if !known {
			return c, fmt.Errorf("-stages: unknown stage %q (known: %s)", s, strings.Join(allStages, ", "))
		}
		c.Stages[s] = true
	}
	for _, sf := range []struct {
		flag string
		in   string
		out  *Shape
	}{
		{"-latency.shape", c.LatencyShapeFlag, &c.LatencyShape},
		{"-fairness.shape", c.FaultShapeFlag, &c.FaultShape},
		{"-profile.shape", c.ProfileShapeFlag, &c.ProfileShape},
	} {
		sh, err := parseShape(sf.in)
		if err != nil {
			return c, fmt.Errorf("%s: %w", sf.flag, err)
		}
		if sh.Records == 0 {
			for _, s := range c.Shapes {
				if s.Name() == sh.Name() {
					sh.Records = s.Records
				}
			}
		}
		if sh.Records == 0 {
			return c, fmt.Errorf("%s: %s is not among -shapes: give a record count (%s:records)", sf.flag, sh.Name(), sh.Name())
		}
		*sf.out = sh
	}
	for _, f := range strings.Split(*fractions, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v <= 0 || v > 1 {
			return c, fmt.Errorf("-latency.rate-fractions: %q is not a fraction in (0, 1]", f)
		}
		c.LatencyFractions = append(c.LatencyFractions, v)
	}
	if c.LatencyCapacity < 0 {
		return c, fmt.Errorf("-latency.capacity must not be negative, got %g", c.LatencyCapacity)
	}
	if err := errors.Join(c.Gateway.validate(), c.RemoteWrite.validate(), c.Shards.validate()); err != nil {
		return c, err
	}
	if c.ReplayBytes <= 0 {
		return c, fmt.Errorf("-replay.bytes must be positive, got %d", c.ReplayBytes)
	}
	switch c.Compression {
	case "none", "snappy", "lz4", "zstd", "gzip":
	default:
		return c, fmt.Errorf("-compression must be none, snappy, lz4, zstd or gzip, got %q", c.Compression)
	}
	if runtime.GOOS != "linux" {
		return c, errors.New("the harness reads /proc for CPU and memory: it runs on Linux only")
	}
	return c, nil
}
