package limits

import (
	"strings"
	"testing"

	"github.com/prometheus/common/model"

	"github.com/ferrylabs/ferry/internal/benchfixture"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// BenchmarkFilter measures Limits.Filter, the pusher's and the gateway's
// storage-free checks, on a valid request of 2,000 series of one sample:
// what a remote-write request of Prometheus's default size costs to check.
func BenchmarkFilter(b *testing.B) {
	for _, bc := range []struct {
		name     string
		utf8     bool
		reversed bool
		otel     bool // UTF-8 names, as OpenTelemetry's: dotted
		legacy   bool
	}{
		{name: "sorted/ascii"},
		{name: "sorted/ascii/legacy", legacy: true},
		{name: "sorted/utf8", utf8: true},
		{name: "sorted/otel-names", otel: true},
		{name: "unsorted/ascii", reversed: true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			limits := Limits{MaxLabelsPerSeries: 30, MaxLabelNameLength: 1024, MaxLabelValueLength: 2048, CreationGracePeriod: 10 * 60e9}
			if bc.legacy {
				limits.NameValidation = model.LegacyValidation
			}
			req := &prompb.WriteRequest{Timeseries: make([]prompb.TimeSeries, 2000)}
			for i := range req.Timeseries {
				ls := benchfixture.NodeLabels(i, bc.utf8)
				if bc.otel {
					otelNames(ls)
				}
				if bc.reversed {
					for l, r := 0, len(ls)-1; l < r; l, r = l+1, r-1 {
						ls[l], ls[r] = ls[r], ls[l]
					}
				}
				req.Timeseries[i] = series(ls, float64(i))
			}
			b.ReportAllocs()
			cpu := benchfixture.CPUTime(b)
			for b.Loop() {
				// A valid request is left as it is, so every round checks
				// the same series.
				if n, first := limits.Filter(req, filterNow); n != 0 || first != nil {
					b.Fatalf("Filter() = %d, %v", n, first)
				}
			}
			benchfixture.ReportCPU(b, cpu)
		})
	}
}

// otelNames gives ls names as OpenTelemetry's arrive with UTF-8 names
// kept: a dotted metric name, label names under a dotted prefix (which
// keeps their order).
func otelNames(ls []prompb.Label) {
	for i := range ls {
		if ls[i].Name == metricNameLabel {
			ls[i].Value = strings.ReplaceAll(ls[i].Value, "_", ".")
		} else {
			ls[i].Name = "k8s." + ls[i].Name
		}
	}
}
