package gateway

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsCountWhatWasReceivedProducedAndRejected(t *testing.T) {
	t.Parallel()
	p := &fakeProducer{}
	g := newTestGateway(t, p, func(c *Config) { c.MaxRecordBytes = 4096; c.DefaultTenant = "d" })
	post(t, g, "/api/v1/push", ctV1, "t", v1Body(t, v1Request(300)))
	post(t, g, "/api/v1/push", ctV1, "", v1Body(t, v1Request(2)))
	post(t, g, "/api/v1/push", "text/plain", "t", nil)
	_, values := p.records()
	for name, tc := range map[string]struct{ got, want float64 }{
		"series":           {testutil.ToFloat64(g.metrics.series), 302},
		"samples":          {testutil.ToFloat64(g.metrics.samples), 302},
		"records":          {testutil.ToFloat64(g.metrics.records), float64(len(values))},
		"split requests":   {testutil.ToFloat64(g.metrics.splitRequests), 1},
		"204 by header":    {testutil.ToFloat64(g.metrics.requests.WithLabelValues("204", classHeader)), 1},
		"204 by default":   {testutil.ToFloat64(g.metrics.requests.WithLabelValues("204", classDefault)), 1},
		"415 by header":    {testutil.ToFloat64(g.metrics.requests.WithLabelValues("415", classHeader)), 1},
		"rejected for 415": {testutil.ToFloat64(g.metrics.rejected.WithLabelValues(reasonContentType)), 1},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", name, tc.got, tc.want)
		}
	}
	if testutil.ToFloat64(g.metrics.bytes.WithLabelValues("snappy")) == 0 || testutil.CollectAndCount(g.metrics.produceDuration) != 1 {
		t.Error("bytes received or produce latency not recorded")
	}
}
