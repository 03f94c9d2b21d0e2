package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
)

// hostileShapes are OTLP exports of the most messages per byte we could
// build: empty data points, empty metrics, empty resources, empty
// attributes, empty exemplars.
func hostileShapes() map[string]pmetric.Metrics {
	const n = 50_000
	shapes := map[string]pmetric.Metrics{}
	md := pmetric.NewMetrics()
	dps := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty().SetEmptyGauge().DataPoints()
	for range n {
		dps.AppendEmpty()
	}
	shapes["empty gauge points"] = md
	md = pmetric.NewMetrics()
	ms := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics()
	for range n {
		ms.AppendEmpty()
	}
	shapes["empty metrics"] = md
	md = pmetric.NewMetrics()
	for range n {
		md.ResourceMetrics().AppendEmpty()
	}
	shapes["empty resources"] = md
	md = pmetric.NewMetrics()
	attrs := md.ResourceMetrics().AppendEmpty().Resource().Attributes()
	for i := range n {
		attrs.PutEmpty(fmt.Sprint(i))
	}
	shapes["empty attributes"] = md
	md = pmetric.NewMetrics()
	dp := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty().SetEmptyGauge().DataPoints().AppendEmpty()
	for range n {
		dp.Exemplars().AppendEmpty()
	}
	shapes["empty exemplars"] = md
	md = pmetric.NewMetrics()
	hps := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty().SetEmptyExponentialHistogram().DataPoints()
	for range n {
		hps.AppendEmpty()
	}
	shapes["empty exponential histogram points"] = md
	return shapes
}

// TestAnOTLPBodyOfEmptyPointsDecodesWithinItsFactor holds pdata's decoding
// of the most hostile shapes, in protobuf and JSON, to otlpDecodeFactor
// and otlpJSONDecodeFactor, which the gateway holds in its in-flight
// bytes before decoding.
func TestAnOTLPBodyOfEmptyPointsDecodesWithinItsFactor(t *testing.T) {
	for name, md := range hostileShapes() {
		pb, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
		if err != nil {
			t.Fatal(err)
		}
		js, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		for enc, body := range map[string][]byte{otlpProtobuf: pb, otlpJSON: js} {
			n := allocated(func() {
				if _, _, rej := newTestGateway(t, &fakeProducer{}, nil).unmarshalOTLP(body, enc); rej != nil {
					t.Error(rej)
				}
			})
			ratio := float64(n) / float64(len(body))
			t.Logf("%s in %s: %d bytes decode with %d bytes allocated, %.1f per byte", name, enc, len(body), n, ratio)
			factor := map[string]int{otlpProtobuf: otlpDecodeFactor, otlpJSON: otlpJSONDecodeFactor}[enc]
			if ratio > float64(factor) {
				t.Errorf("%s in %s: %.1f bytes allocated per byte, over its factor (%d)", name, enc, ratio, factor)
			}
		}
	}
}

// TestAnExportThatTranslatesPastItsBudgetIsRefusedBeforeItTakesTheMemory:
// a target_info sample every 2.5 minutes between points 290 years apart,
// and a 64 KiB service.name on 5,000 points, are small bodies the
// translator would make gigabytes of; each is answered 413 having
// allocated in proportion to its size.
func TestAnExportThatTranslatesPastItsBudgetIsRefusedBeforeItTakesTheMemory(t *testing.T) {
	centuries := otlpRequest(func(ms pmetric.MetricSlice) { gauge(ms, "up", "a", "b") })
	dps := centuries.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().At(0).Gauge().DataPoints()
	dps.At(0).SetTimestamp(1)
	dps.At(1).SetTimestamp(pcommon.Timestamp(time.Date(2260, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()))
	longName := otlpRequest(func(ms pmetric.MetricSlice) {
		paths := make([]string, 5000)
		for i := range paths {
			paths[i] = fmt.Sprint(i)
		}
		gauge(ms, "up", paths...)
	})
	longName.ResourceMetrics().At(0).Resource().Attributes().PutStr("service.name", strings.Repeat("s", 64<<10))
	for name, md := range map[string]pmetric.Metrics{"target_info over centuries": centuries, "a long service.name on every point": longName} {
		t.Run(name, func(t *testing.T) {
			body := protoBody(t, md)
			p := &fakeProducer{}
			g := newTestGateway(t, p, nil)
			var w *httptest.ResponseRecorder
			n := allocated(func() { w = postOTLP(t, g, otlpProtobuf, "", body) })
			rejected, msg := answer(t, w)
			t.Logf("%d-byte body: status %d (%d rejected: %.120s), %d bytes allocated", len(body), w.Code, rejected, msg, n)
			if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "translated") {
				t.Fatalf("status %d, want 413 naming the translation: %s", w.Code, msg)
			}
			if limit := uint64(otlpDecodeFactor+3*otlpExpansion)*uint64(len(body)) + 4<<20; n > limit {
				t.Errorf("%d bytes allocated for a %d-byte body, over %d", n, len(body), limit)
			}
			if _, values := p.records(); len(values) > 0 {
				t.Errorf("%d records produced for a refused export", len(values))
			}
		})
	}
}

// TestAGzipBombIsRefusedHavingInflatedNoMoreThanTheLimit: 64 MiB of zeros
// in a 65 KiB gzip body, against a limit of 100,000 bytes, is answered 413
// having allocated about the limit, not the 64 MiB.
func TestAGzipBombIsRefusedHavingInflatedNoMoreThanTheLimit(t *testing.T) {
	bomb := gzipped(t, make([]byte, 64<<20))
	g := newTestGateway(t, &fakeProducer{}, func(c *Config) { c.MaxRequestBytes = 100_000; c.MaxInflightBytes = 8 << 20 })
	var w *httptest.ResponseRecorder
	n := allocated(func() { w = postOTLP(t, g, otlpProtobuf, "gzip", bomb) })
	t.Logf("%d-byte gzip bomb: status %d, %d bytes allocated", len(bomb), w.Code, n)
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", w.Code)
	}
	if n > 2<<20 {
		t.Errorf("%d bytes allocated for a limit of 100,000", n)
	}
}
