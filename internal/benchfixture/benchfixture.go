// Package benchfixture holds what the micro-benchmarks of several packages
// share, so that they measure the same request the same way: the labels of
// a node exporter's series, a remote-write request of them, and the
// process's CPU time.
package benchfixture

import (
	"fmt"
	"strconv"
	"syscall"
	"testing"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// NodeLabels are the labels of series i as a node exporter writes them,
// sorted by name as Prometheus sends them: the metric name and nine more,
// about 180 bytes of label text. With utf8, two values carry non-ASCII
// text.
func NodeLabels(i int, utf8 bool) []prompb.Label {
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

// NodeRequest is a remote-write request of n series of NodeLabels (ASCII),
// each with one sample at ts.
func NodeRequest(n int, ts int64) *prompb.WriteRequest {
	req := &prompb.WriteRequest{Timeseries: make([]prompb.TimeSeries, n)}
	for i := range req.Timeseries {
		req.Timeseries[i] = prompb.TimeSeries{Labels: NodeLabels(i, false), Samples: []prompb.Sample{{Value: float64(i) * 1.5, Timestamp: ts}}}
	}
	return req
}

// CPUTime is the CPU time the process has used, in nanoseconds: on a
// machine shared with other work it measures the code's cost where wall
// time (ns/op) measures the machine's load too. Report it per operation as
// cpu-ns/op with ReportCPU.
func CPUTime(tb testing.TB) int64 {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// ReportCPU reports the CPU time per operation since start (a CPUTime) as
// cpu-ns/op.
func ReportCPU(b *testing.B, start int64) {
	b.ReportMetric(float64(CPUTime(b)-start)/float64(b.N), "cpu-ns/op")
}
