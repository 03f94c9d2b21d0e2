package wire

import (
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// BenchmarkDecodeRemoteWrite decodes a request as Prometheus sends one to
// the gateway: 2,000 series (its default max_samples_per_send) of one
// sample, each with the metric name and nine more labels of a node
// exporter's, sorted by name.
func BenchmarkDecodeRemoteWrite(b *testing.B) {
	ts := time.Now().Add(-time.Minute).UnixMilli()
	req := &prompb.WriteRequest{Timeseries: make([]prompb.TimeSeries, 2000)}
	for i := range req.Timeseries {
		req.Timeseries[i] = prompb.TimeSeries{
			Labels: []prompb.Label{
				{Name: "__name__", Value: "node_cpu_seconds_total"},
				{Name: "cluster", Value: "eu-west-1-prod"},
				{Name: "cpu", Value: strconv.Itoa(i % 64)},
				{Name: "env", Value: "production"},
				{Name: "instance", Value: fmt.Sprintf("10.0.%d.%d:9100", i/250, i%250)},
				{Name: "job", Value: "node-exporter"},
				{Name: "mode", Value: []string{"idle", "user", "system", "iowait"}[i%4]},
				{Name: "namespace", Value: "monitoring"},
				{Name: "pod", Value: fmt.Sprintf("node-exporter-%05d", i/64)},
				{Name: "region", Value: "eu-west-1"},
			},
			Samples: []prompb.Sample{{Value: float64(i) * 1.5, Timestamp: ts}},
		}
	}
	buf, err := req.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	d := Decoder{Limits: pusherLimits}
	var wr prompb.WriteRequest
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	cpu := cpuTime(b)
	for b.Loop() {
		if err := d.Decode(buf, &wr); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime(b)-cpu)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the CPU time the process has used, in nanoseconds: on a
// machine shared with other work it measures the decoder's cost where wall
// time (ns/op) measures the machine's load too.
func cpuTime(b *testing.B) int64 {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
