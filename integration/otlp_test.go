package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/storage/remote/otlptranslator/prometheusremotewrite"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	otelmetric "go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/ferrylabs/ferry/pusher/queryapi"
)

// translated is what Prometheus's OTLP translator makes of exports: float
// samples as rawSamples renders them, native histogram samples counted by
// series, and each family's metadata.
type translated struct {
	floats     map[string][]string
	histograms map[string]int
	metadata   map[string]string
}

func (tr *translated) Append(_ storage.SeriesRef, ls labels.Labels, _, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, opts storage.AppendV2Options) (storage.SeriesRef, error) {
	names := make([]string, 0, ls.Len())
	ls.Range(func(l labels.Label) { names = append(names, l.Name+"="+strconv.Quote(l.Value)) })
	sort.Strings(names)
	key := "{" + strings.Join(names, ",") + "}"
	if h != nil || fh != nil {
		tr.histograms[key]++
	} else {
		tr.floats[key] = append(tr.floats[key], fmt.Sprintf("%v=%v", float64(t)/1000, strconv.FormatFloat(v, 'f', -1, 64)))
	}
	if md := opts.Metadata; !md.IsEmpty() {
		tr.metadata[opts.MetricFamilyName] = fmt.Sprintf("%s %q %q", md.Type, md.Help, md.Unit)
	}
	return 0, nil
}

func (*translated) Commit() error   { return nil }
func (*translated) Rollback() error { return nil }

// capturingTransport keeps each export's body as the SDK sent it.
type capturingTransport struct {
	mu     sync.Mutex
	bodies [][]byte
}

func (c *capturingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.bodies = append(c.bodies, body)
	c.mu.Unlock()
	r2 := r.Clone(r.Context())
	r2.Body = io.NopCloser(bytes.NewReader(body))
	return http.DefaultTransport.RoundTrip(r2)
}

// TestOpenTelemetrySDKExportsAreQueryableAsPrometheusTranslatesThem drives
// the gateway with the official OpenTelemetry Go SDK (otlpmetrichttp,
// gzip; a counter, an up-down counter, a gauge, a histogram, an
// exponential histogram; resource attributes) for three collection
// cycles, through Kafka, the consumer and the pusher's TSDB, and checks
// that the query API returns every float sample of every series with the
// labels, timestamp and value Prometheus's translator gives for the same
// exports (target_info and classic histogram series included), every
// native histogram sample, and each family's metadata in /api/v1/metadata:
// nothing the gateway answered 200 was refused on the way.
func TestOpenTelemetrySDKExportsAreQueryableAsPrometheusTranslatesThem(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	cfg := gatewayConfig(t, p, "127.0.0.1:0")
	g := startGateway(t, cfg)
	ctx := t.Context()

	capture := &capturingTransport{}
	exp, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL("http://"+g.HTTPAddr()+"/otlp/v1/metrics"),
		otlpmetrichttp.WithHeaders(map[string]string{"X-Scope-OrgID": gatewayTenant}),
		otlpmetrichttp.WithCompression(otlpmetrichttp.GzipCompression),
		otlpmetrichttp.WithHTTPClient(&http.Client{Transport: capture}))
	if err != nil {
		t.Fatal(err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "checkout"), attribute.String("service.instance.id", "pod-1"),
		attribute.String("deployment.environment", "e2e"))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res),
		sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp, sdkmetric.WithInterval(time.Hour))),
		sdkmetric.WithView(sdkmetric.NewView(sdkmetric.Instrument{Name: "rpc.server.duration"},
			sdkmetric.Stream{Aggregation: sdkmetric.AggregationBase2ExponentialHistogram{MaxSize: 160, MaxScale: 20}})))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	meter := mp.Meter("ferry.e2e")
	requests, _ := meter.Int64Counter("http.server.requests", otelmetric.WithDescription("Requests served."))
	active, _ := meter.Int64UpDownCounter("http.server.active_requests")
	temperature, _ := meter.Float64Gauge("room.temperature", otelmetric.WithUnit("Cel"))
	duration, _ := meter.Float64Histogram("http.server.request.duration", otelmetric.WithUnit("s"), otelmetric.WithDescription("Time to answer."))
	rpc, _ := meter.Float64Histogram("rpc.server.duration", otelmetric.WithUnit("ms"))
	for cycle := range 3 {
		for i, route := range []string{"/cart", "/pay"} {
			attrs := otelmetric.WithAttributes(attribute.String("http.route", route))
			requests.Add(ctx, int64(cycle+i+1), attrs)
			active.Add(ctx, int64(1-2*i), attrs)
			temperature.Record(ctx, 20.5+float64(cycle), attrs)
			duration.Record(ctx, 0.05*float64(cycle+i+1), attrs)
			rpc.Record(ctx, 3*float64(cycle+i+1), attrs)
		}
		if err := mp.ForceFlush(ctx); err != nil {
			t.Fatalf("cycle %d: export: %v", cycle, err)
		}
		time.Sleep(10 * time.Millisecond) // distinct timestamps per cycle
	}

	want := translated{floats: map[string][]string{}, histograms: map[string]int{}, metadata: map[string]string{}}
	capture.mu.Lock()
	for i, gz := range capture.bodies {
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		req := pmetricotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			t.Fatalf("export %d: %v", i, err)
		}
		if _, err := prometheusremotewrite.NewPrometheusConverter(&want).FromMetrics(ctx, req.Metrics(), cfg.Gateway.OTLP.Settings()); err != nil {
			t.Fatalf("the translator refused export %d: %v", i, err)
		}
	}
	capture.mu.Unlock()
	if len(want.floats) < 20 || len(want.histograms) != 2 || !slices.ContainsFunc(mapsKeys(want.floats), func(k string) bool { return strings.Contains(k, `"target_info"`) }) {
		t.Fatalf("the translator made %d float series, %d histogram series (want target_info, and 2 native)", len(want.floats), len(want.histograms))
	}

	at := time.Now().UnixMilli()
	var diff string
	waitFor(t, 60*time.Second, "every translated sample to be queryable", func() bool {
		got, err := rawSamples(t, p.pusher.HTTPAddr(), gatewayTenant, `{__name__=~".+"}[10m]`, at)
		if err != nil {
			diff = err.Error()
			return false
		}
		diff = diffSamples(want.floats, got)
		return diff == ""
	})
	if diff != "" {
		t.Fatal(diff)
	}
	for key, n := range want.histograms {
		name := key[strings.Index(key, `__name__="`)+10:]
		name = name[:strings.IndexByte(name, '"')]
		q := fmt.Sprintf(`count_over_time({__name__=%q, http_route=%q}[10m])`, name, routeOf(key))
		if v := queryValue(t, p.pusher.HTTPAddr(), gatewayTenant, q, at); v != float64(n) {
			t.Errorf("%s: %v native histogram samples stored, the translator made %d", q, v, n)
		}
	}
	stored := metadataOf(t, p.pusher.HTTPAddr())
	for family, md := range want.metadata {
		if stored[family] != md {
			t.Errorf("metadata of %s: stored %q, translated %q", family, stored[family], md)
		}
	}
	t.Logf("%d exports: %d float series and %d native histogram series queryable as translated, %d families' metadata",
		len(capture.bodies), len(want.floats), len(want.histograms), len(want.metadata))
}

func mapsKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// routeOf is the http_route of a series key.
func routeOf(key string) string {
	i := strings.Index(key, `http_route="`)
	if i < 0 {
		return ""
	}
	s := key[i+len(`http_route="`):]
	return s[:strings.IndexByte(s, '"')]
}

// metadataOf reads /api/v1/metadata as "type help unit" per family.
func metadataOf(t *testing.T, addr string) map[string]string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/metadata", nil)
	req.Header.Set(queryapi.TenantHeader, gatewayTenant)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var out struct {
		Data map[string][]struct{ Type, Help, Unit string } `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for family, mds := range out.Data {
		if len(mds) > 0 {
			m[family] = fmt.Sprintf("%s %q %q", mds[0].Type, mds[0].Help, mds[0].Unit)
		}
	}
	return m
}
