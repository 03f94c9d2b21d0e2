package main

import (
	"math"
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
	w.observe(500*time.Millisecond, 0, 1000)
	for i := 1; i <= 10; i++ {
		w.observe(500*time.Millisecond+time.Duration(i)*100*time.Millisecond, float64(100*i), 1000)
	}
	w.observe(2500*time.Millisecond, 1000, 1000)
	n, d := w.result()
	if n != 800 || d != 800*time.Millisecond {
		t.Fatalf("steady window = %d records in %s, want 800 in 800ms", n, d)
	}
	var empty steadyWindow
	empty.observe(time.Second, 1000, 1000) // everything within one poll
	if n, d := empty.result(); n != 0 || d != 0 {
		t.Fatalf("a replay seen by one scrape gave a window of %d records in %s", n, d)
	}
}
