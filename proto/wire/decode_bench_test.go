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
	buf, err := benchfixture.NodeRequest(2000, ts).Marshal()
	if err != nil {
		b.Fatal(err)
	}
	for _, scheme := range []model.ValidationScheme{model.UTF8Validation, model.LegacyValidation} {
		b.Run(scheme.String(), func(b *testing.B) {
			d := Decoder{Limits: pusherLimits}
			rules := LabelRules{MaxLabelsPerSeries: 30, MaxLabelNameLength: 1024, MaxLabelValueLength: 2048, NameValidation: scheme}
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
