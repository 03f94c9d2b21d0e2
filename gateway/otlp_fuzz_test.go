package gateway

import (
	"net/http"
	"testing"

	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
)

// FuzzOTLP sends arbitrary bodies, as protobuf or JSON, to the OTLP
// endpoint: every answer is one the specification names, never a panic
// or a 500, and every in-flight byte is released.
func FuzzOTLP(f *testing.F) {
	md := otlpRequest(func(ms pmetric.MetricSlice) {
		gauge(ms, "up", "/", "/x")
		sum(ms, "requests", pmetric.AggregationTemporalityCumulative)
	})
	pb, _ := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
	js, _ := pmetricotlp.NewExportRequestFromMetrics(md).MarshalJSON()
	f.Add(pb, false)
	f.Add(js, true)
	f.Add([]byte{0x0a, 0x00}, false)
	f.Add([]byte(`{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"a","gauge":{"dataPoints":[{}]}}]}]}]}`), true)
	f.Fuzz(func(t *testing.T, body []byte, isJSON bool) {
		ct := otlpProtobuf
		if isJSON {
			ct = otlpJSON
		}
		g := newTestGateway(t, &fakeProducer{}, func(c *Config) { c.MaxInflightBytes = 64 << 20 })
		w := postOTLP(t, g, ct, "", body)
		switch w.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		if n := g.inflight.bytes(); n != 0 {
			t.Fatalf("%d in-flight bytes held after the answer", n)
		}
	})
}
