package wire

import (
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/ferrylabs/ferry/internal/benchfixture"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// BenchmarkDecodeRemoteWrite decodes a request as Prometheus sends one to
// the gateway: 2,000 series (its default max_samples_per_send) of one
// sample, each with the metric name and nine more labels of a node
// exporter's, sorted by name.
func BenchmarkDecodeRemoteWrite(b *testing.B) {
	ts := time.Now().Add(-time.Minute).UnixMilli()
	req := benchfixture.NodeRequest(2000, ts)
	buf, err := req.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	d := Decoder{Limits: pusherLimits}
	var wr prompb.WriteRequest
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	cpu := benchfixture.CPUTime(b)
	for b.Loop() {
		if err := d.Decode(buf, &wr); err != nil {
			b.Fatal(err)
		}
	}
	benchfixture.ReportCPU(b, cpu)
}

// BenchmarkScan is Scan of the request BenchmarkDecodeRemoteWrite decodes,
// with the pusher's default label rules under each name validation
// scheme: what the gateway pays for a request it forwards as it is.
func BenchmarkScan(b *testing.B) {
	ts := time.Now().Add(-time.Minute).UnixMilli()
	classic := benchfixture.NodeRequest(2000, ts)
	otel := benchfixture.NodeRequest(2000, ts)
	for _, s := range otel.Timeseries {
		for i := range s.Labels {
			if s.Labels[i].Name == metricNameLabel {
				s.Labels[i].Value = "node.cpu.seconds.total"
			} else {
				s.Labels[i].Name = "k8s." + s.Labels[i].Name
			}
		}
	}
	for _, bc := range []struct {
		name   string
		req    *prompb.WriteRequest
		scheme model.ValidationScheme
	}{
		{"utf8", classic, model.UTF8Validation},
		{"legacy", classic, model.LegacyValidation},
		{"utf8/otel-names", otel, model.UTF8Validation},
	} {
		b.Run(bc.name, func(b *testing.B) {
			buf, err := bc.req.Marshal()
			if err != nil {
				b.Fatal(err)
			}
			d := Decoder{Limits: pusherLimits}
			rules := LabelRules{MaxLabelsPerSeries: 30, MaxLabelNameLength: 1024, MaxLabelValueLength: 2048, NameValidation: bc.scheme}
			b.ReportAllocs()
			b.SetBytes(int64(len(buf)))
			cpu := benchfixture.CPUTime(b)
			for b.Loop() {
				if _, ok := d.Scan(buf, rules); !ok {
					b.Fatal("Scan declined the request")
				}
			}
			benchfixture.ReportCPU(b, cpu)
		})
	}
}
