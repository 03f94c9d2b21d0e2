package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// window is a throughput window of samples over 10 s with cpu seconds.
func window(samples int64, proc, harness float64) throughputRun {
	return throughputRun{Requests: samples / 2000, Samples: samples, Window: 10 * time.Second,
		ProcCPU: time.Duration(proc * float64(time.Second)), HarnessCPU: time.Duration(harness * float64(time.Second))}
}

func findTargetRow(t *testing.T, md, prefix string) string {
	t.Helper()
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "| "+prefix) {
			return l
		}
	}
	t.Fatalf("no target row starting %q in:\n%s", prefix, md)
	return ""
}

func TestGatewayTargets(t *testing.T) {
	cfg := gatewayConfig{Clients: 8, Tenants: 4, Partitions: 4, SamplesPerRequest: 2000, Rounds: 3,
		Duration: 10 * time.Second, Warmup: time.Second, LatencyFraction: 0.5, LatencyDuration: 10 * time.Second}
	for _, tc := range []struct {
		name     string
		rounds   []gatewayRound
		p99      time.Duration
		failed   int64
		ratio    string // the measured cell's start
		verdicts []string
	}{
		{
			name: "should pass both when the median round is at 75 % and p99 is 30 ms",
			rounds: []gatewayRound{
				{Ceiling: window(1_000_000, 0, 2), Gateway: window(600_000, 3, 1)},
				{Ceiling: window(1_000_000, 0, 2), Gateway: window(750_000, 3, 1)},
				{Ceiling: window(1_000_000, 0, 2), Gateway: window(900_000, 3, 1)},
			},
			p99: 30 * time.Millisecond, ratio: "75% (median of 3 rounds, 60%–90%", verdicts: []string{"**pass**", "**pass**"},
		},
		{
			name: "should miss both when the median round is at 65 % and p99 is 80 ms",
			rounds: []gatewayRound{
				{Ceiling: window(1_000_000, 0, 2), Gateway: window(650_000, 3, 1)},
				{Ceiling: window(1_000_000, 0, 2), Gateway: window(900_000, 3, 1)},
				{Ceiling: window(1_000_000, 0, 2), Gateway: window(200_000, 3, 1)},
			},
			p99: 80 * time.Millisecond, ratio: "65% (median of 3 rounds, 20%–90%", verdicts: []string{"**miss**", "**miss**"},
		},
		{
			name: "should miss the latency target when requests failed, however fast the rest",
			rounds: []gatewayRound{
				{Ceiling: window(1_000_000, 0, 2), Gateway: window(800_000, 3, 1)},
			},
			p99: 5 * time.Millisecond, failed: 3, ratio: "80% (median of 1 rounds, 80%–80%", verdicts: []string{"**pass**", "**miss**"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &gatewayResult{Cfg: cfg, Rounds: tc.rounds, Latency: &gatewayLatency{
				Fraction: 0.5, RequestRate: 100, Window: 10 * time.Second, Failed: tc.failed,
				Lat: latencySummary{N: 1000, P50: time.Millisecond, P99: tc.p99, Max: tc.p99},
			}}
			md := (&report{Gateway: g}).markdown()
			thr := findTargetRow(t, md, "gateway ≥ 70%")
			if !strings.Contains(thr, "| "+tc.ratio) || !strings.Contains(thr, tc.verdicts[0]) {
				t.Errorf("throughput row %q: want %q and %s", thr, tc.ratio, tc.verdicts[0])
			}
			lat := findTargetRow(t, md, "gateway request p99")
			if !strings.Contains(lat, tc.verdicts[1]) {
				t.Errorf("latency row %q: want %s", lat, tc.verdicts[1])
			}
		})
	}
}

func TestGatewayCPURatio(t *testing.T) {
	// The ceiling spends 2 s per M samples, the gateway 3: the gateway
	// could reach two thirds of the ceiling on CPU alone.
	r := gatewayRound{Ceiling: window(1_000_000, 0, 2), Gateway: window(1_000_000, 3, 1)}
	if got := r.cpuRatio(); math.Abs(got-2.0/3) > 1e-9 {
		t.Errorf("cpu ratio %v, want 2/3", got)
	}
}

func TestGatewayTargetsNotMeasured(t *testing.T) {
	g := &gatewayResult{Cfg: gatewayConfig{Clients: 8, SamplesPerRequest: 2000, LatencyFraction: 0.5},
		Rounds: []gatewayRound{{Ceiling: window(1_000_000, 0, 2), Gateway: throughputRun{Err: "gateway exited"}}}}
	md := (&report{Gateway: g}).markdown()
	for _, prefix := range []string{"gateway ≥ 70%", "gateway request p99"} {
		if row := findTargetRow(t, md, prefix); !strings.Contains(row, "not measured | **miss**") {
			t.Errorf("row %q: a failed measurement must be a miss", row)
		}
	}
}

func TestRemoteWriteTarget(t *testing.T) {
	rw := func(direct, pipeline int64) rwRound {
		return rwRound{
			Direct:   rwRun{Samples: 1_000_000, SteadySamples: direct, Steady: time.Second, Elapsed: 2 * time.Second},
			Tenant:   rwRun{Samples: 1_000_000, SteadySamples: pipeline, Steady: time.Second, Elapsed: 2 * time.Second},
			Pipeline: rwRun{Samples: 1_000_000, SteadySamples: pipeline, Steady: time.Second, Elapsed: 3 * time.Second},
		}
	}
	for _, tc := range []struct {
		name    string
		rounds  []rwRound
		want    string
		verdict string
	}{
		{"should pass at a median of 88 %", []rwRound{rw(400_000, 340_000), rw(500_000, 450_000)}, "88% (median of 2 rounds, 85%–90%); against a plain client with the pipeline's concurrency (a stream per tenant): 100% (100%–100%)", "**pass**"},
		{"should miss at a median of 70 %", []rwRound{rw(400_000, 280_000), rw(400_000, 280_000), rw(100_000, 99_000)}, "70% (median of 3 rounds, 70%–99%)", "**miss**"},
		{"should miss when a run failed", []rwRound{{Direct: rwRun{Err: "boom"}}}, "not measured", "**miss**"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md := (&report{RemoteWrite: &rwResult{Rounds: tc.rounds}}).markdown()
			row := findTargetRow(t, md, "pipeline(remote-write → Prometheus)")
			if !strings.Contains(row, "| "+tc.want) || !strings.Contains(row, tc.verdict) {
				t.Errorf("row %q: want %q and %s", row, tc.want, tc.verdict)
			}
		})
	}
}

func TestByBlock(t *testing.T) {
	sh := rwShape{Tenants: 2, SeriesPerTenant: 30, SamplesPerRequest: 10, StepMs: 1000}
	var bodies [][]rwBody
	for tn := range 2 {
		b, err := sh.tenantBodies(tn, 4)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	streams := byBlock(bodies, sh.blocks())
	if len(streams) != 6 {
		t.Fatalf("%d streams, want 2 tenants x 3 blocks", len(streams))
	}
	owner := map[string]int{} // series -> stream
	for i, st := range streams {
		if len(st) != 4 {
			t.Errorf("stream %d has %d requests, want one per step", i, len(st))
		}
		for _, b := range st {
			var req prompb.WriteRequest
			if err := req.Unmarshal(b.Raw); err != nil {
				t.Fatal(err)
			}
			for _, ts := range req.Timeseries {
				k := pusherFormat(ts.Labels)
				if o, ok := owner[k]; ok && o != i {
					t.Fatalf("series %s in streams %d and %d: they could reach Prometheus out of order", k, o, i)
				}
				owner[k] = i
			}
		}
	}
	if len(owner) != 60 {
		t.Errorf("%d series over the streams, want 60", len(owner))
	}
}

func TestRWRunRate(t *testing.T) {
	r := rwRun{Samples: 1000, Elapsed: 2 * time.Second}
	if got := r.samplesPerSec(); got != 500 {
		t.Errorf("whole-run rate %v, want 500", got)
	}
	r.SteadySamples, r.Steady = 800, time.Second
	if got := r.samplesPerSec(); got != 800 {
		t.Errorf("steady rate %v, want 800", got)
	}
}

func TestPprofTop(t *testing.T) {
	out := `File: ferry-gateway
Type: cpu
Showing nodes accounting for 1.2s, 80% of 1.5s total
      flat  flat%   sum%        cum   cum%
     0.50s 33.33% 33.33%      0.50s 33.33%  runtime.memmove
     0.30s 20.00% 53.33%      0.60s 40.00%  github.com/ferrylabs/ferry/gateway.(*Gateway).push
`
	got := pprofTop(out)
	if len(got) != 2 || got[0] != "     0.50s 33.33% 33.33%      0.50s 33.33%  runtime.memmove" || !strings.Contains(got[1], "(*Gateway).push") {
		t.Errorf("pprofTop = %q", got)
	}
}

func TestStageFlags(t *testing.T) {
	var sb strings.Builder
	c, err := parseFlags([]string{"-stages", "gateway,remote-write"}, &sb)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Stages[stageGateway] || !c.Stages[stageRemoteWrite] || len(c.Stages) != 2 {
		t.Errorf("stages %v", c.Stages)
	}
	def, err := parseFlags(nil, &sb)
	if err != nil {
		t.Fatal(err)
	}
	if !def.Stages[stageGateway] || !def.Stages[stageRemoteWrite] {
		t.Errorf("the default stages %v leave out gateway or remote-write", def.Stages)
	}
	for _, bad := range [][]string{{"-gateway.clients", "0"}, {"-gateway.latency-fraction", "1.5"}, {"-remote-write.steps", "0"}} {
		if _, err := parseFlags(bad, &sb); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}
