package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
)

// decodeOTLP inflates and decodes an OTLP body as the gateway does.
func decodeOTLP(t *testing.T, gz []byte) pmetric.Metrics {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	req := pmetricotlp.NewExportRequest()
	if err := req.UnmarshalProto(raw); err != nil {
		t.Fatal(err)
	}
	return req.Metrics()
}

func TestAnOTLPBodyCarriesTheSameSeriesAndSamplesAsTheRemoteWriteRequest(t *testing.T) {
	sh := rwShape{Tenants: 2, SeriesPerTenant: 100, SamplesPerRequest: 50, StartMs: 1_700_000_000_000, StepMs: 15000}
	req := sh.request(1, 1, 3)
	b, err := otlpBody(rwTenant(1), req)
	if err != nil {
		t.Fatal(err)
	}
	if !b.OTLP || b.Tenant != rwTenant(1) || b.Samples != 50 {
		t.Fatalf("body OTLP %v tenant %q samples %d, want an OTLP body of tenant %q with 50 samples", b.OTLP, b.Tenant, b.Samples, rwTenant(1))
	}
	ms := decodeOTLP(t, b.Compressed).ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
	if ms.Len() != len(req.Timeseries) {
		t.Fatalf("%d metrics for %d series", ms.Len(), len(req.Timeseries))
	}
	for i, ts := range req.Timeseries {
		m := ms.At(i)
		if m.Type() != pmetric.MetricTypeGauge || m.Gauge().DataPoints().Len() != 1 {
			t.Fatalf("metric %d: %v with %d points, want a gauge of one point", i, m.Type(), m.Gauge().DataPoints().Len())
		}
		dp := m.Gauge().DataPoints().At(0)
		if dp.DoubleValue() != ts.Samples[0].Value || dp.Timestamp().AsTime().UnixMilli() != ts.Samples[0].Timestamp {
			t.Errorf("series %d: point %v at %v, want %v at %d ms", i, dp.DoubleValue(), dp.Timestamp(), ts.Samples[0].Value, ts.Samples[0].Timestamp)
		}
		if dp.Attributes().Len() != len(ts.Labels)-1 {
			t.Errorf("series %d: %d attributes for %d labels and the name", i, dp.Attributes().Len(), len(ts.Labels))
		}
		for _, l := range ts.Labels {
			if l.Name == "__name__" {
				if m.Name() != l.Value {
					t.Errorf("series %d: metric named %q, want %q", i, m.Name(), l.Value)
				}
				continue
			}
			if v, ok := dp.Attributes().Get(l.Name); !ok || v.Str() != l.Value {
				t.Errorf("series %d: attribute %s = %q, want %q", i, l.Name, v.Str(), l.Value)
			}
		}
	}
}

func TestTheGatewayStagesOTLPBodiesMatchItsRemoteWriteBodiesClientByClient(t *testing.T) {
	cfg := gatewayConfig{Clients: 6, Tenants: 4, SamplesPerRequest: 30}
	rw, err := gatewayBodies(cfg)
	if err != nil {
		t.Fatal(err)
	}
	otlp, err := gatewayOTLPBodies(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for c := range rw {
		names := decodeOTLP(t, otlp[c].Compressed).ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
		if otlp[c].Tenant != rw[c].Tenant || otlp[c].Samples != rw[c].Samples {
			t.Fatalf("client %d: OTLP tenant %q with %d samples, remote write %q with %d", c, otlp[c].Tenant, otlp[c].Samples, rw[c].Tenant, rw[c].Samples)
		}
		// Client c sends block c/T of its tenant: its first series' labels
		// tell the block.
		attrs := names.At(0).Gauge().DataPoints().At(0).Attributes()
		for _, l := range sh(cfg).seriesLabels(c%cfg.Tenants, (c/cfg.Tenants)*cfg.SamplesPerRequest) {
			if v, ok := attrs.Get(l.Name); l.Name != "__name__" && (!ok || v.Str() != l.Value) {
				t.Errorf("client %d: first series has %s=%q, remote write's %q", c, l.Name, v.Str(), l.Value)
			}
		}
	}
}

// sh is the shape gatewayBodies uses, for the labels of a series.
func sh(cfg gatewayConfig) rwShape {
	return rwShape{Tenants: cfg.Tenants, SeriesPerTenant: cfg.SamplesPerRequest * ((cfg.Clients + cfg.Tenants - 1) / cfg.Tenants), SamplesPerRequest: cfg.SamplesPerRequest}
}

func TestOTLPRatiosAreOTLPOverRemoteWrite(t *testing.T) {
	// Remote write: 1 M samples for 3 s of gateway CPU; OTLP: half the
	// samples for the same CPU, so twice the CPU per sample.
	r := gatewayRound{Gateway: window(1_000_000, 3, 1), OTLP: window(500_000, 3, 1)}
	if got := r.otlpRatio(); math.Abs(got-0.5) > 1e-9 {
		t.Errorf("samples/s ratio %v, want 0.5", got)
	}
	if got := r.otlpCPURatio(); math.Abs(got-2) > 1e-9 {
		t.Errorf("CPU per sample ratio %v, want 2", got)
	}
}

func TestTheOTLPTableShowsEachRoundAndTheMedianOfTheMeasuredOnes(t *testing.T) {
	g := &gatewayResult{Cfg: gatewayConfig{Clients: 8, Tenants: 4, SamplesPerRequest: 2000, OTLP: true, LatencyFraction: 0.5},
		OTLPRawBytes: 300_000, OTLPBodyBytes: 40_000, Rounds: []gatewayRound{
			{Gateway: window(1_000_000, 3, 1), OTLP: window(500_000, 3, 1)},
			// A failed window may have counted samples: the median leaves it out.
			{Gateway: window(1_000_000, 3, 1), OTLP: throughputRun{Samples: 100_000, Window: 10 * time.Second, ProcCPU: time.Second, Err: "gateway exited"}},
			{Gateway: window(1_000_000, 2, 1), OTLP: window(800_000, 4, 1)},
		}}
	md := (&report{Gateway: g}).markdown()
	for _, want := range []string{
		"| 1 | 100,000 | 50,000 | 0.50 | 3.00 | 6.00 | 2.00 |",
		"| 2 | FAILED: gateway exited |",
		"| 3 | 100,000 | 80,000 | 0.80 | 2.00 | 5.00 | 2.50 |",
		// Rounds 1 and 3 only: the failed round is left out.
		"OTLP ÷ remote write samples/s 0.65 (0.50–0.80), CPU per sample 2.25 (2.00–2.50)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	g.Cfg.OTLP = false
	if md := (&report{Gateway: g}).markdown(); strings.Contains(md, "OTLP beside remote write") {
		t.Errorf("with -gateway.otlp=false the report still has the OTLP table:\n%s", md)
	}
}

func TestAnOTLPAnswerThatRejectedPointsCountsAsFailed(t *testing.T) {
	var rejected int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Encoding") != "gzip" || r.Header.Get("Content-Type") != "application/x-protobuf" ||
			r.Header.Get("X-Prometheus-Remote-Write-Version") != "" {
			http.Error(w, "not an OTLP/HTTP protobuf gzip request", http.StatusUnsupportedMediaType)
			return
		}
		resp := pmetricotlp.NewExportResponse()
		resp.PartialSuccess().SetRejectedDataPoints(rejected)
		resp.PartialSuccess().SetErrorMessage("out of bounds")
		b, _ := resp.MarshalProto()
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	sh := rwShape{Tenants: 1, SeriesPerTenant: 10, SamplesPerRequest: 10, StepMs: 1000, StartMs: time.Now().UnixMilli()}
	b, err := otlpBody(rwTenant(0), sh.request(0, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	for _, rejected = range []int64{0, 3} {
		counts := &sendCounts{}
		status, err := postRW(context.Background(), newRWClient(1), srv.URL, b)
		counts.record(b, status, err)
		s := counts.snapshot()
		if rejected == 0 && (s.ok != 1 || s.okSamples != 10) {
			t.Errorf("a full success counted ok %d samples %d, failed %d (%s)", s.ok, s.okSamples, s.failed, counts.errString())
		}
		if rejected > 0 && (s.failed != 1 || s.okSamples != 0 || !strings.Contains(counts.errString(), "3 points rejected")) {
			t.Errorf("a partial success counted ok %d samples %d failed %d (%q)", s.ok, s.okSamples, s.failed, counts.errString())
		}
	}
}

func TestTheGatewaySectionNamesTheExtraGatewayFlags(t *testing.T) {
	g := &gatewayResult{Cfg: gatewayConfig{Clients: 8, Tenants: 4, SamplesPerRequest: 2000, LatencyFraction: 0.5}}
	if md := (&report{Gateway: g}).markdown(); !strings.Contains(md, "One `ferry-gateway` process (default flags,") {
		t.Errorf("without -gateway.args the section does not say default flags:\n%s", md)
	}
	g.Cfg.Args = " -gateway.max-inflight-bytes=4294967296  -log.level=info"
	if md := (&report{Gateway: g}).markdown(); !strings.Contains(md, "(flags `-gateway.max-inflight-bytes=4294967296 -log.level=info`,") {
		t.Errorf("the section does not name the -gateway.args flags:\n%s", md)
	}
}

func TestARefusedOTLPRequestIsCountedFailedWithTheGatewaysReason(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		b, _ := proto.Marshal(&spb.Status{Code: 14, Message: "gateway overloaded: over -gateway.max-inflight-bytes"})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	sh := rwShape{Tenants: 1, SeriesPerTenant: 10, SamplesPerRequest: 10, StepMs: 1000, StartMs: time.Now().UnixMilli()}
	b, err := otlpBody(rwTenant(0), sh.request(0, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	counts := &sendCounts{}
	status, err := postRW(context.Background(), newRWClient(1), srv.URL, b)
	counts.record(b, status, err)
	if s := counts.snapshot(); s.failed != 1 || s.ok != 0 {
		t.Errorf("a 503 counted ok %d failed %d", s.ok, s.failed)
	}
	if got, want := counts.errString(), "HTTP 503: gateway overloaded: over -gateway.max-inflight-bytes"; got != want {
		t.Errorf("first error %q, want %q", got, want)
	}
}
