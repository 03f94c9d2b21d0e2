package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/storage/remote/otlptranslator/prometheusremotewrite"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	otelmetric "go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/ferrylabs/ferry/internal/kafkatest"
)

// recordingAppender is the test's own storage for Prometheus's
// translator: every append as one line of text, a family's metadata once.
type recordingAppender struct{ lines, metadata []string }

func (a *recordingAppender) Append(_ storage.SeriesRef, ls labels.Labels, _, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, opts storage.AppendV2Options) (storage.SeriesRef, error) {
	switch {
	case fh != nil:
		a.lines = append(a.lines, fmt.Sprintf("%s @%d %s", ls, t, fh))
	case h != nil:
		a.lines = append(a.lines, fmt.Sprintf("%s @%d %s", ls, t, h.ToFloat(nil)))
	default:
		a.lines = append(a.lines, fmt.Sprintf("%s @%d %v", ls, t, v))
	}
	for _, e := range opts.Exemplars {
		a.lines = append(a.lines, fmt.Sprintf("%s exemplar %s @%d %v", ls, e.Labels, e.Ts, e.Value))
	}
	if md := opts.Metadata; !md.IsEmpty() && opts.MetricFamilyName != "" {
		line := fmt.Sprintf("%s %s %q %q", opts.MetricFamilyName, md.Type, md.Unit, md.Help)
		if !slices.Contains(a.metadata, line) {
			a.metadata = append(a.metadata, line)
		}
	}
	return 0, nil
}

func (*recordingAppender) Commit() error   { return nil }
func (*recordingAppender) Rollback() error { return nil }

// recordLines renders records of Ferry's topic as recordingAppender does
// the translator's appends, read with upstream's prompb.
func recordLines(t *testing.T, values [][]byte) (lines, metadata []string) {
	t.Helper()
	for _, v := range values {
		var req prompb.WriteRequest
		if err := req.Unmarshal(v); err != nil {
			t.Fatalf("a record is not a remote-write 1.0 WriteRequest: %v", err)
		}
		b := labels.NewScratchBuilder(0)
		for _, ts := range req.Timeseries {
			ls := ts.ToLabels(&b, nil)
			for _, s := range ts.Samples {
				lines = append(lines, fmt.Sprintf("%s @%d %v", ls, s.Timestamp, s.Value))
			}
			for _, h := range ts.Histograms {
				fh := h.ToFloatHistogram()
				lines = append(lines, fmt.Sprintf("%s @%d %s", ls, h.Timestamp, fh))
			}
			for _, e := range ts.Exemplars {
				ex := e.ToExemplar(&b, nil)
				lines = append(lines, fmt.Sprintf("%s exemplar %s @%d %v", ls, ex.Labels, ex.Ts, ex.Value))
			}
		}
		for _, md := range req.Metadata {
			metadata = append(metadata, fmt.Sprintf("%s %s %q %q", md.MetricFamilyName, strings.ToLower(md.Type.String()), md.Unit, md.Help))
		}
	}
	return lines, metadata
}

// capturingProxy forwards exports to the gateway and keeps each body as
// the SDK sent it, and each answer's partial success.
type capturingProxy struct {
	target string
	mu     sync.Mutex
	bodies [][]byte
	errs   []string
}

func (p *capturingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, p.target, bytes.NewReader(body))
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	p.mu.Lock()
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err == nil {
			body, err = io.ReadAll(zr)
		}
		if err != nil {
			p.errs = append(p.errs, err.Error())
		}
	}
	p.bodies = append(p.bodies, body)
	er := pmetricotlp.NewExportResponse()
	if resp.StatusCode != http.StatusOK || er.UnmarshalProto(answer) != nil || er.PartialSuccess().ErrorMessage() != "" {
		p.errs = append(p.errs, fmt.Sprintf("status %d: %q", resp.StatusCode, answer))
	}
	p.mu.Unlock()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

// TestEveryPointTheOpenTelemetrySDKExportsIsProducedAsPrometheusTranslatesIt
// drives the gateway with the official OpenTelemetry Go SDK (a
// MeterProvider with a counter, an up-down counter, a gauge, a histogram
// and an exponential histogram, resource attributes, exemplars, the
// otlpmetrichttp exporter, gzip, cumulative temporality) for three
// collection cycles, reads back what Kafka holds, and compares it series
// by series, sample by sample, with what Prometheus's translator makes of
// the same exports, target_info and metadata included.
func TestEveryPointTheOpenTelemetrySDKExportsIsProducedAsPrometheusTranslatesIt(t *testing.T) {
	cluster, topic := kafkatest.NewFake(t, 1)
	var settings prometheusremotewrite.Settings
	p, stop := startGateway(t, func(c *Config) {
		c.Gateway.KafkaAddress = cluster.ListenAddrs()[0]
		c.Gateway.Topic = topic
		settings = c.Gateway.OTLP.Settings()
	})
	defer stop()
	proxy := &capturingProxy{target: "http://" + p.HTTPAddr() + "/otlp/v1/metrics"}
	srv := httptest.NewServer(proxy)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exp, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(srv.URL+"/otlp/v1/metrics"),
		otlpmetrichttp.WithHeaders(map[string]string{"X-Scope-OrgID": "otel"}),
		otlpmetrichttp.WithCompression(otlpmetrichttp.GzipCompression))
	if err != nil {
		t.Fatal(err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "checkout"), attribute.String("service.namespace", "shop"),
		attribute.String("service.instance.id", "pod-1"), attribute.String("deployment.environment", "test"), attribute.Int("host.cpus", 8))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res),
		sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(time.Hour))),
		sdkmetric.WithExemplarFilter(exemplar.AlwaysOnFilter),
		sdkmetric.WithView(sdkmetric.NewView(sdkmetric.Instrument{Name: "rpc.server.duration"},
			sdkmetric.Stream{Aggregation: sdkmetric.AggregationBase2ExponentialHistogram{MaxSize: 160, MaxScale: 20}})))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	meter := mp.Meter("ferry.test/otlp", otelmetric.WithInstrumentationVersion("1.0"))
	requests, _ := meter.Int64Counter("http.server.requests", otelmetric.WithDescription("Requests served."), otelmetric.WithUnit("{request}"))
	active, _ := meter.Int64UpDownCounter("http.server.active_requests", otelmetric.WithDescription("Requests in flight."))
	temperature, _ := meter.Float64Gauge("room.temperature", otelmetric.WithUnit("Cel"))
	duration, _ := meter.Float64Histogram("http.server.request.duration", otelmetric.WithUnit("s"), otelmetric.WithDescription("Time to answer."))
	rpc, _ := meter.Float64Histogram("rpc.server.duration", otelmetric.WithUnit("ms"))

	for cycle := range 3 {
		for i, route := range []string{"/cart", "/pay"} {
			attrs := otelmetric.WithAttributes(attribute.String("http.route", route), attribute.Int("http.status_code", 200+i))
			requests.Add(ctx, int64(cycle+i+1), attrs)
			active.Add(ctx, int64(1-2*i), attrs)
			temperature.Record(ctx, 20.5+float64(cycle), attrs)
			duration.Record(ctx, 0.05*float64(cycle+i+1), attrs)
			rpc.Record(ctx, 3*float64(cycle+i+1), attrs)
		}
		if err := mp.ForceFlush(ctx); err != nil {
			t.Fatalf("cycle %d: export: %v", cycle, err)
		}
	}

	proxy.mu.Lock()
	defer proxy.mu.Unlock()
	if len(proxy.errs) > 0 || len(proxy.bodies) != 3 {
		t.Fatalf("%d exports, want 3; errors: %q", len(proxy.bodies), proxy.errs)
	}
	var want recordingAppender
	for i, body := range proxy.bodies {
		req := pmetricotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			t.Fatalf("export %d: %v", i, err)
		}
		if _, err := prometheusremotewrite.NewPrometheusConverter(&want).FromMetrics(ctx, req.Metrics(), settings); err != nil {
			t.Fatalf("the translator refused export %d: %v", i, err)
		}
	}
	keys, values := readTopic(t, cluster.ListenAddrs()[0], topic)
	for _, k := range keys {
		if k != "otel" {
			t.Errorf("a record of tenant %q, want otel", k)
		}
	}
	got, gotMetadata := recordLines(t, values)
	compareLines(t, "series samples", got, want.lines)
	// Every export's records say its families' metadata.
	if len(gotMetadata) != 3*len(want.metadata) {
		t.Errorf("%d metadata entries in the records of 3 exports of %d families", len(gotMetadata), len(want.metadata))
	}
	slices.Sort(gotMetadata)
	compareLines(t, "metadata", slices.Compact(gotMetadata), want.metadata)
	for _, must := range []string{
		`{__name__="target_info", deployment_environment="test", host_cpus="8", instance="pod-1", job="shop/checkout"}`,
		`{__name__="http_server_requests_total", http_route="/cart", http_status_code="200", instance="pod-1", job="shop/checkout"} @`,
		`{__name__="http_server_request_duration_seconds_bucket", `, `{__name__="rpc_server_duration_milliseconds", `,
		`{__name__="room_temperature_celsius", `, `{__name__="http_server_active_requests", `, ` exemplar `,
	} {
		if !slices.ContainsFunc(got, func(l string) bool { return strings.Contains(l, must) }) {
			t.Errorf("nothing produced has %s", must)
		}
	}
	t.Logf("%d exports, %d records: %d samples, histograms and exemplars, %d metadata entries, each as the translator makes them", len(proxy.bodies), len(values), len(got), len(gotMetadata))
}

// compareLines fails unless got and want hold the same lines, in any order.
func compareLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	slices.Sort(got)
	slices.Sort(want)
	if slices.Equal(got, want) {
		return
	}
	for _, l := range want {
		if !slices.Contains(got, l) {
			t.Errorf("%s: missing %s", what, l)
		}
	}
	for _, l := range got {
		if !slices.Contains(want, l) {
			t.Errorf("%s: not from the translator: %s", what, l)
		}
	}
	t.Errorf("%s: %d produced, %d translated", what, len(got), len(want))
}

// readTopic reads every record of topic.
func readTopic(t *testing.T, addr, topic string) (keys []string, values [][]byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	for int64(len(values)) < total {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("read %d of %d records: %v", len(values), total, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			keys = append(keys, string(r.Key))
			values = append(values, r.Value)
		})
	}
	return keys, values
}
