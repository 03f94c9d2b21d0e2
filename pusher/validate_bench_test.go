package pusher

import (
	"fmt"
	"strconv"
	"syscall"
	"testing"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// benchFilterLabels are the labels of series i as a node exporter writes
// them, sorted by name as Prometheus sends them: the metric name and nine
// more. With utf8, two values carry non-ASCII text.
func benchFilterLabels(i int, utf8 bool) []prompb.Label {
	site, owner := "eu-west-1-prod", "monitoring"
	if utf8 {
		site, owner = "zürich-süd-prod", "überwachung-日本"
	}
	return []prompb.Label{
		{Name: "__name__", Value: "node_cpu_seconds_total"},
		{Name: "cluster", Value: site},
		{Name: "cpu", Value: strconv.Itoa(i % 64)},
		{Name: "env", Value: "production"},
		{Name: "instance", Value: fmt.Sprintf("10.0.%d.%d:9100", i/250, i%250)},
		{Name: "job", Value: "node-exporter"},
		{Name: "mode", Value: []string{"idle", "user", "system", "iowait"}[i%4]},
		{Name: "namespace", Value: owner},
		{Name: "pod", Value: fmt.Sprintf("node-exporter-%05d", i/64)},
		{Name: "region", Value: "eu-west-1"},
	}
}

// BenchmarkFilter measures Limits.Filter, the pusher's and the gateway's
// storage-free checks, on a valid request of 2,000 series of one sample:
// what a remote-write request of Prometheus's default size costs to check.
func BenchmarkFilter(b *testing.B) {
	for _, bc := range []struct {
		name     string
		utf8     bool
		reversed bool
	}{
		{name: "sorted/ascii"},
		{name: "sorted/utf8", utf8: true},
		{name: "unsorted/ascii", reversed: true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			limits := Limits{MaxLabelsPerSeries: 30, MaxLabelNameLength: 1024, MaxLabelValueLength: 2048, CreationGracePeriod: 10 * 60e9}
			req := &prompb.WriteRequest{Timeseries: make([]prompb.TimeSeries, 2000)}
			for i := range req.Timeseries {
				ls := benchFilterLabels(i, bc.utf8)
				if bc.reversed {
					for l, r := 0, len(ls)-1; l < r; l, r = l+1, r-1 {
						ls[l], ls[r] = ls[r], ls[l]
					}
				}
				req.Timeseries[i] = series(ls, float64(i))
			}
			b.ReportAllocs()
			cpu := cpuTime(b)
			for b.Loop() {
				// A valid request is left as it is, so every round checks
				// the same series.
				if n, first := limits.Filter(req, filterNow); n != 0 || first != nil {
					b.Fatalf("Filter() = %d, %v", n, first)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the CPU time the process has used, in nanoseconds: on a
// machine shared with other work it measures the checks' cost where wall
// time (ns/op) measures the machine's load too.
func cpuTime(b *testing.B) int64 {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
