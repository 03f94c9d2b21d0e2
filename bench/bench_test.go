package main

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestParseShape(t *testing.T) {
	sh, err := parseShape("4x100x10:5000")
	if err != nil || sh != (Shape{Partitions: 4, Tenants: 100, Series: 10, Records: 5000}) {
		t.Fatalf("got %+v, %v", sh, err)
	}
	if sh.Name() != "4x100x10" || sh.Label() != "(4,100,10)" || sh.Samples() != 50000 {
		t.Fatalf("names: %s %s %d", sh.Name(), sh.Label(), sh.Samples())
	}
	for _, bad := range []string{"4x100", "0x1x1", "ax1x1", "1x1x1:-3"} {
		if _, err := parseShape(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if _, err := parseShapes("1x1x1"); err == nil {
		t.Error("a shape without a record count was accepted in -shapes")
	}
}

const page = `# HELP ferry_consumer_produce_to_ack_seconds x
# TYPE ferry_consumer_produce_to_ack_seconds histogram
ferry_consumer_produce_to_ack_seconds_bucket{le="0.01"} 10
ferry_consumer_produce_to_ack_seconds_bucket{le="0.02"} 90
ferry_consumer_produce_to_ack_seconds_bucket{le="0.04"} 100
ferry_consumer_produce_to_ack_seconds_bucket{le="+Inf"} 100
ferry_consumer_produce_to_ack_seconds_sum 1.5
ferry_consumer_produce_to_ack_seconds_count 100
ferry_consumer_acks_total{status="ok"} 7
ferry_consumer_acks_total{status="server_error"} 2
odd{a="x\"y",b="z"} 1e3
`

func TestParseMetricsAndQuantile(t *testing.T) {
	m, err := parseMetrics(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.sum("ferry_consumer_acks_total", map[string]string{"status": "ok"}); got != 7 {
		t.Errorf("acks ok = %v", got)
	}
	if got := m.sum("ferry_consumer_acks_total", nil); got != 9 {
		t.Errorf("acks = %v", got)
	}
	if got := m.sum("odd", map[string]string{"a": `x"y`}); got != 1000 {
		t.Errorf("escaped label: %v", got)
	}
	h := m.histogram("ferry_consumer_produce_to_ack_seconds")
	// The median is the 50th of 100: 40 of the 80 in (0.01, 0.02].
	if v, lo, hi, _ := h.quantile(0.5); math.Abs(v-0.015) > 1e-9 || lo != 0.01 || hi != 0.02 {
		t.Errorf("p50 = %v in (%v, %v]", v, lo, hi)
	}
	if v, _, _, _ := h.quantile(0.05); math.Abs(v-0.005) > 1e-9 {
		t.Errorf("p5 = %v", v)
	}
	// Doubling every bucket leaves quantiles alone; the difference of two
	// scrapes is the window's histogram.
	d := h.add(h).minus(h)
	if v, _, _, _ := d.quantile(0.99); math.Abs(v-0.038) > 1e-9 {
		t.Errorf("p99 of the difference = %v", v)
	}
	over := histogram{bounds: []float64{0.1, math.Inf(1)}, counts: []float64{1, 10}}
	if v, _, _, above := over.quantile(0.99); !above || v != 0.1 {
		t.Errorf("quantile in +Inf: %v %v", v, above)
	}
}

func TestRateAndDurations(t *testing.T) {
	xs := []int64{10, 10, 20, 20}
	if r := rate(xs, 500*time.Millisecond, time.Second, 2*time.Second); r != 40 {
		t.Errorf("rate = %v", r)
	}
	var d durations
	for i := 1; i <= 100; i++ {
		d.add(time.Duration(i) * time.Millisecond)
	}
	s := d.summary()
	if s.N != 100 || s.P50 != 51*time.Millisecond || s.P99 != 100*time.Millisecond || s.Max != 100*time.Millisecond {
		t.Errorf("summary = %+v", s)
	}
	if partitionOf("tenant-13", 4) != 1 {
		t.Error("partitionOf")
	}
}

func TestWriteReportKeepsTheRest(t *testing.T) {
	path := t.TempDir() + "/b.md"
	if err := writeFile(path, "# T\n\nintro\n\n"+beginMarker+"\nold\n"+endMarker+"\n\n## Analysis\nkept\n"); err != nil {
		t.Fatal(err)
	}
	if err := writeReport(path, beginMarker+"\nnew\n"+endMarker+"\n"); err != nil {
		t.Fatal(err)
	}
	b, err := readFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b, "old") || !strings.Contains(b, "new") || !strings.Contains(b, "intro") || !strings.Contains(b, "kept") {
		t.Errorf("report:\n%s", b)
	}
}

func TestSteadyWindowLeavesOutStartAndTail(t *testing.T) {
	var w steadyWindow
	// 1,000 records: nothing for 500ms (processes starting), then 100 per
	// 100ms, then a second's wait for the commit.
	w.observe(500*time.Millisecond, 0, 1000, nil)
	for i := 1; i <= 10; i++ {
		w.observe(500*time.Millisecond+time.Duration(i)*100*time.Millisecond, float64(100*i), 1000, nil)
	}
	w.observe(2500*time.Millisecond, 1000, 1000, nil)
	n, d := w.result()
	if n != 800 || d != 800*time.Millisecond {
		t.Fatalf("steady window = %d records in %s, want 800 in 800ms", n, d)
	}
	var empty steadyWindow
	empty.observe(time.Second, 1000, 1000, nil) // everything within one poll
	if n, d := empty.result(); n != 0 || d != 0 {
		t.Fatalf("a replay seen by one scrape gave a window of %d records in %s", n, d)
	}
}

func TestSummarizeMedianAndSpread(t *testing.T) {
	s := summarize([]float64{0.52, math.NaN(), 0.26, 0.40})
	if s.N != 3 || s.Median != 0.40 || s.Min != 0.26 || s.Max != 0.52 {
		t.Errorf("odd rounds: %+v", s)
	}
	s = summarize([]float64{4, 1, 3, 2})
	if s.N != 4 || s.Median != 2.5 || s.Min != 1 || s.Max != 4 {
		t.Errorf("even rounds: %+v", s)
	}
	if s := summarize(nil); s.N != 0 || !math.IsNaN(s.Median) {
		t.Errorf("no rounds: %+v", s)
	}
	if got := fmtSpread(summarize([]float64{0.5, 0.61, 0.7}), pct); got != "61% (50%–70%)" {
		t.Errorf("fmtSpread = %q", got)
	}
	if got := fmtSpread(summarize([]float64{0.5}), pct); got != "50%" {
		t.Errorf("fmtSpread of one round = %q", got)
	}
}

// stageAt is a successful stage of the given rate: 1,000 records of one
// sample each, over seconds chosen for the rate, with cpu seconds in total.
func stageAt(name string, round int, recordsPerSec, cpu float64) stageResult {
	return stageResult{Stage: name, Round: round, Records: 1000, Samples: 1000,
		Elapsed: time.Duration(1000 / recordsPerSec * float64(time.Second)), HarnessCPU: time.Duration(cpu * float64(time.Second)),
		PusherCPU: time.Duration(cpu * float64(time.Second) / 2)}
}

func TestRatiosPairStagesOfOneRound(t *testing.T) {
	r := &shapeResult{Stages: []stageResult{
		stageAt(stageConsume, 0, 4000, 1),
		stageAt(stageDecode, 1, 1000, 1), stageAt(stagePipelineDiscard, 1, 500, 2),
		stageAt(stageSimpleLoop, 0, 50, 8),
		stageAt(stagePipelineDiscard, 2, 900, 2), stageAt(stageDecode, 2, 1000, 1),
		stageAt(stageDecode, 3, 1000, 1), stageAt(stagePipelineDiscard, 3, 700, 2),
	}}
	s := summarize(r.ratios(stagePipelineDiscard, stageDecode, false))
	if s.N != 3 || math.Abs(s.Median-0.7) > 1e-9 || math.Abs(s.Min-0.5) > 1e-9 || math.Abs(s.Max-0.9) > 1e-9 {
		t.Errorf("3/2 over rounds: %+v", s)
	}
	// The simple loop ran once and stands in every round.
	if got := r.ratios(stagePipelineDiscard, stageSimpleLoop, false); len(got) != 3 || math.Abs(got[0]-10) > 1e-9 {
		t.Errorf("3/L = %v", got)
	}
	// By CPU: the decode stage costs 1.5 s per 1,000 samples, the pipeline 3.
	if got := r.ratios(stagePipelineDiscard, stageDecode, true); len(got) != 3 || math.Abs(got[0]-0.5) > 1e-9 {
		t.Errorf("3/2 by CPU = %v", got)
	}
	if got := pushOneCPURatios(r); len(got) != 3 || math.Abs(got[0]-4) > 1e-9 {
		t.Errorf("PushOne CPU = %v", got)
	}
	// A failed round leaves its ratio out rather than counting a zero.
	r.Stages[7].Err = "boom"
	if got := r.ratios(stagePipelineDiscard, stageDecode, false); len(got) != 2 {
		t.Errorf("with a failed round: %v", got)
	}
}

func TestTargetRows(t *testing.T) {
	many := &shapeResult{Shape: Shape{Partitions: 4, Tenants: 1000, Series: 10, Records: 1000}, Stages: []stageResult{
		stageAt(stageDecode, 1, 1000, 1), stageAt(stagePipelineDiscard, 1, 850, 1.1), stageAt(stagePipelineTSDB, 1, 300, 3),
		stageAt(stageSimpleLoop, 0, 85, 5),
	}}
	many.Stages[2].PusherPeakRSS, many.Stages[2].Syncs, many.Stages[2].SyncMean = 300<<20, 10, 0.2
	rep := &report{Shapes: []*shapeResult{many}, Scale: []scaleResult{{Tenants: 1000, SeriesPerTenant: 1000, Series: 1_000_000, PeakRSS: 3 << 30, Stage: stageResult{Elapsed: time.Second}}}}
	got := map[string]targetRow{}
	for _, row := range rep.targetRows() {
		got[row.Target[:2]+strings.SplitN(row.Target, " ", 3)[1]] = row
		if strings.HasPrefix(row.Target, "1. ") && strings.Contains(row.Target, "Sync") {
			got["sync"] = row
		}
		if strings.HasPrefix(row.Target, "1. ") && strings.Contains(row.Target, "RSS ≤ 400") {
			got["rss"] = row
		}
	}
	want := map[string]string{
		"1.pipeline(tsdb)":    "**miss** (-5 points)", // 300/850 = 35%
		"3.pipeline(discard)": "**pass** (+5 points)", // 85%, by CPU 1/1.1 = 91%
		"sync":                "**miss** (4.0× the target)",
		"rss":                 "**pass** (0.8× the target)",
		"6.pusher":            "**pass** (0.79× the target)", // 3 GiB / 1M = 3.1 KiB
		"8.reference:":        "**measured**",
		"2.pipeline(tsdb)":    "**miss**", // (4,100,100) not in the run
	}
	for k, v := range want {
		if got[k].Result != v {
			t.Errorf("%s: result %q, want %q (row %+v)", k, got[k].Result, v, got[k])
		}
	}
	if m := got["8.reference:"].Measured; m != "(4,1000,10) 10.0×" {
		t.Errorf("simple loop row measured %q", m)
	}
	if m := got["6.pusher"].Measured; !strings.HasPrefix(m, "3.15 KiB per series (pusher peak RSS 3.00 GiB / 1,000,000 series)") {
		t.Errorf("scale row measured %q", m)
	}
	if r := got["5.PushOne:"].Result; r != "**miss** (worst 4.5×)" {
		t.Errorf("PushOne row %q", r)
	}
	md := rep.markdown()
	for _, s := range []string{"### Targets (issue 17)", "| 3. pipeline(discard) ≥ 80% of consume+decode, (4,1000,10), by throughput and by CPU | 85%; by CPU 91% (1 round) |",
		"| (4,1000,10) | simple loop | 85 |", "10.0×"} {
		if !strings.Contains(md, s) {
			t.Errorf("report lacks %q", s)
		}
	}
}

func TestQuickSetsOnlyFlagsNotGiven(t *testing.T) {
	c, err := parseFlags([]string{"-quick", "-rounds=2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Rounds != 2 || c.ScaleSeries != 40000 || len(c.Shapes) != 3 || c.Shapes[0].Records != 5000 || c.ReplayBytes != 200_000_000 {
		t.Errorf("quick config: rounds %d, scale %d, shapes %+v, replay %d", c.Rounds, c.ScaleSeries, c.Shapes, c.ReplayBytes)
	}
	c, err = parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Rounds != 3 || c.ScaleSeries != 1_000_000 || !c.Stages[stageScale] {
		t.Errorf("defaults: rounds %d, scale %d, stages %v", c.Rounds, c.ScaleSeries, c.Stages)
	}
	if _, err := parseFlags([]string{"-rounds=0"}, io.Discard); err == nil {
		t.Error("-rounds=0 accepted")
	}
}

func TestScaleVariants(t *testing.T) {
	v := scaleVariants(1_000_000)
	if v[0].Tenants != 1000 || v[0].SeriesPerTenant != 1000 || v[2].Tenants != 1 || v[2].SeriesPerTenant != 1_000_000 {
		t.Fatalf("variants: %+v %+v", v[0], v[2])
	}
	req := scaleRequest("tenant-0", 2500, 2, 1)
	if len(req.Timeseries) != 500 || req.Timeseries[0].Labels[2].Value != "2000" {
		t.Errorf("last record of a tenant: %d series, first %v", len(req.Timeseries), req.Timeseries[0].Labels)
	}
}

func TestFairnessBacklogSizedByTime(t *testing.T) {
	// 20,000 records replayed in 2 s; the fault window ends at 6 s.
	if n := grownRecords(20000, 2*time.Second, 6*time.Second); n < 60000 {
		t.Errorf("grown to %d records, which at the baseline's pace ends before the window", n)
	}
	if n := grownRecords(20000, 0, 6*time.Second); n <= 20000 {
		t.Errorf("a baseline seen to take no time grew to %d", n)
	}
	// At 24,000 records/s, a 2+10 s window needs 288,000 records at least.
	if n := fairnessRecords(150000, 24000, 12*time.Second); n < 288000 {
		t.Errorf("sized %d records for 12 s at 24,000 records/s", n)
	}
	if n := fairnessRecords(150000, math.NaN(), 12*time.Second); n != 150000 {
		t.Errorf("without a measured rate: %d", n)
	}
}

func TestCPUPerSampleIsTakenOverTheSteadyWindow(t *testing.T) {
	// CPU grows 1 s per 100 ms while records are acknowledged, and 5 s
	// before the first (starting processes, opening tenants).
	var w steadyWindow
	clock := 5 * time.Second
	cpuNow := func() cpuSplit { return cpuSplit{Consumers: clock, Pusher: clock / 2} }
	w.observe(500*time.Millisecond, 0, 1000, cpuNow)
	for i := 1; i <= 10; i++ {
		clock += time.Second
		w.observe(500*time.Millisecond+time.Duration(i)*100*time.Millisecond, float64(100*i), 1000, cpuNow)
	}
	cpu, ok := w.cpu()
	if !ok || cpu.Consumers != 8*time.Second || cpu.Pusher != 4*time.Second {
		t.Fatalf("steady CPU = %+v, %v; want 8 s of consumers and 4 s of pusher", cpu, ok)
	}
	n, d := w.result()
	st := stageResult{Records: 1000, Samples: 10_000, SteadyRecords: n, Steady: d, ConsumerCPU: cpu.Consumers, SteadyCPU: true}
	// 8 s over the 800 records (8,000 samples) of the window.
	if got := st.cpuPerMSamples(st.ConsumerCPU); got != 1000 {
		t.Errorf("consumer CPU per M samples = %v, want 1000", got)
	}

	var noCPU steadyWindow
	for i := 1; i <= 10; i++ {
		noCPU.observe(time.Duration(i)*100*time.Millisecond, float64(100*i), 1000, nil)
	}
	if _, ok := noCPU.cpu(); ok {
		t.Error("a window observed without CPU readings reported CPU")
	}
}

// TestScrapeAsksForUncompressedMetrics: the harness scrapes the consumers
// it measures every pollEvery, and compressing each page was half of what
// that cost them.
func TestScrapeAsksForUncompressedMetrics(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Accept-Encoding"); got != "identity" {
			http.Error(w, "Accept-Encoding "+got, http.StatusBadRequest)
			return
		}
		_, _ = w.Write([]byte("ferry_consumer_acks_total{status=\"ok\"} 42\n"))
	}))
	defer srv.Close()
	m, err := scrape(context.Background(), strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.sum("ferry_consumer_acks_total", map[string]string{"status": "ok"}); got != 42 {
		t.Errorf("acks = %v, want 42", got)
	}
}
