package gateway

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// otlpRequest builds an export of one resource (service.name "api", so
// job="api", and one more attribute, so that it has a target_info) whose
// metrics fill adds.
func otlpRequest(fill func(ms pmetric.MetricSlice)) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "api")
	rm.Resource().Attributes().PutStr("service.instance.id", "i-1")
	rm.Resource().Attributes().PutStr("host.name", "h-1")
	fill(rm.ScopeMetrics().AppendEmpty().Metrics())
	return md
}

func otlpNow() pcommon.Timestamp { return pcommon.NewTimestampFromTime(time.Now().Add(-time.Minute)) }

// gauge adds a gauge of one point per attribute value.
func gauge(ms pmetric.MetricSlice, name string, values ...string) {
	m := ms.AppendEmpty()
	m.SetName(name)
	g := m.SetEmptyGauge()
	for i, v := range values {
		dp := g.DataPoints().AppendEmpty()
		dp.SetTimestamp(otlpNow())
		dp.SetDoubleValue(float64(i))
		dp.Attributes().PutStr("path", v)
	}
}

// sum adds a monotonic sum of one point with the given temporality.
func sum(ms pmetric.MetricSlice, name string, temporality pmetric.AggregationTemporality) {
	m := ms.AppendEmpty()
	m.SetName(name)
	s := m.SetEmptySum()
	s.SetIsMonotonic(true)
	s.SetAggregationTemporality(temporality)
	dp := s.DataPoints().AppendEmpty()
	dp.SetTimestamp(otlpNow())
	dp.SetIntValue(7)
}

func protoBody(t testing.TB, md pmetric.Metrics) []byte {
	t.Helper()
	b, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func postOTLP(t testing.TB, g *Gateway, ct, ce string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/otlp/v1/metrics", bytes.NewReader(body))
	r.Header.Set("Content-Type", ct)
	if ce != "" {
		r.Header.Set("Content-Encoding", ce)
	}
	r.Header.Set("X-Scope-OrgID", "t")
	w := httptest.NewRecorder()
	mux := http.NewServeMux()
	g.Register(mux)
	mux.ServeHTTP(w, r)
	return w
}

// answer reads an OTLP answer: the partial success of a 200, or the
// google.rpc.Status message of an error.
func answer(t testing.TB, w *httptest.ResponseRecorder) (rejected int64, msg string) {
	t.Helper()
	if w.Code == http.StatusOK {
		resp := pmetricotlp.NewExportResponse()
		unmarshal := resp.UnmarshalProto
		if w.Header().Get("Content-Type") == otlpJSON {
			unmarshal = resp.UnmarshalJSON
		}
		if err := unmarshal(w.Body.Bytes()); err != nil {
			t.Fatalf("200 answer is not an ExportMetricsServiceResponse: %v", err)
		}
		return resp.PartialSuccess().RejectedDataPoints(), resp.PartialSuccess().ErrorMessage()
	}
	var st spb.Status
	unmarshal := proto.Unmarshal
	if w.Header().Get("Content-Type") == otlpJSON {
		unmarshal = protojson.Unmarshal
	}
	if err := unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatalf("%d answer is not a google.rpc.Status: %v", w.Code, err)
	}
	return 0, st.GetMessage()
}

// decodeRecords decodes the records a fake producer got, keeping the
// series with data (the pusher's checks leave a series whose every sample
// they refused without data, which stores nothing).
func decodeRecords(t testing.TB, values [][]byte) []prompb.TimeSeries {
	t.Helper()
	var out []prompb.TimeSeries
	for _, v := range values {
		var req prompb.WriteRequest
		if err := req.Unmarshal(v); err != nil {
			t.Fatal(err)
		}
		for _, ts := range req.Timeseries {
			if len(ts.Samples)+len(ts.Histograms) > 0 {
				out = append(out, ts)
			}
		}
	}
	return out
}

func TestBadOTLPInputGetsTheStatusTheOTLPSpecificationAsks(t *testing.T) {
	t.Parallel()
	good := protoBody(t, otlpRequest(func(ms pmetric.MetricSlice) { gauge(ms, "up", "/") }))
	onlyDelta := protoBody(t, otlpRequest(func(ms pmetric.MetricSlice) { sum(ms, "requests", pmetric.AggregationTemporalityDelta) }))
	mixed := protoBody(t, otlpRequest(func(ms pmetric.MetricSlice) {
		sum(ms, "requests", pmetric.AggregationTemporalityDelta)
		sum(ms, "bytes", pmetric.AggregationTemporalityCumulative)
	}))
	badLabel := protoBody(t, otlpRequest(func(ms pmetric.MetricSlice) { gauge(ms, "up", "/ok", "bad \xff utf-8") }))
	onlyBadLabel := protoBody(t, otlpRequest(func(ms pmetric.MetricSlice) { gauge(ms, "up", "\xff") }))
	manyAttributes := otlpRequest(func(ms pmetric.MetricSlice) { gauge(ms, "up", "/") })
	for i := range 10_000 {
		manyAttributes.ResourceMetrics().At(0).Resource().Attributes().PutStr(fmt.Sprintf("attr.%d", i), "v")
	}
	jsonBody, err := pmetricotlp.NewExportRequestFromMetrics(otlpRequest(func(ms pmetric.MetricSlice) { gauge(ms, "up", "/") })).MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	bare := pmetric.NewMetrics() // no attribute beside job's: no target_info
	bare.ResourceMetrics().AppendEmpty().Resource().Attributes().PutStr("service.name", "api")
	sum(bare.ResourceMetrics().At(0).ScopeMetrics().AppendEmpty().Metrics(), "requests", pmetric.AggregationTemporalityDelta)
	small := func(c *Config) { c.MaxRequestBytes = 4096; c.MaxInflightBytes = 1 << 20 }
	for _, tc := range []struct {
		name, ct, ce string
		body         []byte
		mutate       func(*Config)
		want         int
		wantRejected int64
		wantText     string
		wantSeries   int
	}{
		{name: "a valid export is answered 200 without partial success", ct: otlpProtobuf, body: good, want: 200, wantSeries: 2},
		{name: "a gzipped export is inflated", ct: otlpProtobuf, ce: "gzip", body: gzipped(t, good), want: 200, wantSeries: 2},
		{name: "a JSON export is answered in JSON", ct: otlpJSON, body: jsonBody, want: 200, wantSeries: 2},
		{name: "an export of which nothing can be stored is refused", ct: otlpProtobuf, body: protoBody(t, bare), want: 400, wantText: "delta"},
		{name: "bytes that are not protobuf are refused", ct: otlpProtobuf, body: []byte("\xff\xff\xff\xff not protobuf"), want: 400, wantText: "not an OTLP"},
		{name: "JSON of the wrong shape is refused", ct: otlpJSON, body: []byte(`{"resourceMetrics": 3}`), want: 400, wantText: "not an OTLP"},
		{name: "a body that is not JSON is refused", ct: otlpJSON, body: []byte(`{"resourceMetrics": [`), want: 400, wantText: "not an OTLP"},
		{name: "a body labelled gzip that is not is refused", ct: otlpProtobuf, ce: "gzip", body: good, want: 400, wantText: "gzip"},
		{name: "a body over the limit is refused", ct: otlpProtobuf, body: make([]byte, 5000), mutate: small, want: 413, wantText: "limit"},
		{name: "a gzip body over the limit only inflated is refused", ct: otlpProtobuf, ce: "gzip", body: gzipped(t, make([]byte, 64<<20)), mutate: func(c *Config) { c.MaxRequestBytes = 100_000; c.MaxInflightBytes = 8 << 20 }, want: 413, wantText: "inflates"},
		{name: "a body whose decoding could take more than the in-flight bytes is refused", ct: otlpProtobuf, body: protoBody(t, manyAttributes), mutate: func(c *Config) { c.MaxRequestBytes = 1 << 20; c.MaxInflightBytes = 4 << 20 }, want: 413, wantText: "-gateway.max-inflight-bytes"},
		{name: "an unknown content type is unsupported", ct: "text/plain", body: good, want: 415, wantText: "Content-Type"},
		{name: "an unknown content encoding is unsupported", ct: otlpProtobuf, ce: "br", body: good, want: 415, wantText: "Content-Encoding"},
		{name: "an export of only delta sums keeps only target_info", ct: otlpProtobuf, body: onlyDelta, want: 200, wantRejected: 1, wantText: "delta", wantSeries: 1},
		{name: "delta sums beside cumulative ones are a partial success", ct: otlpProtobuf, body: mixed, want: 200, wantRejected: 1, wantText: "delta", wantSeries: 2},
		{name: "a point with an invalid UTF-8 label is a partial success", ct: otlpProtobuf, body: badLabel, want: 200, wantRejected: 1, wantText: "UTF-8", wantSeries: 2},
		{name: "an export of only an invalid label keeps only target_info", ct: otlpProtobuf, body: onlyBadLabel, want: 200, wantRejected: 1, wantText: "UTF-8", wantSeries: 1},
		{name: "10,000 resource attributes leave target_info out", ct: otlpProtobuf, body: protoBody(t, manyAttributes), want: 200, wantRejected: 1, wantText: "labels", wantSeries: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := &fakeProducer{}
			g := newTestGateway(t, p, tc.mutate)
			w := postOTLP(t, g, tc.ct, tc.ce, tc.body)
			rejected, msg := answer(t, w)
			if w.Code != tc.want || rejected != tc.wantRejected {
				t.Fatalf("status %d with %d rejected, want %d with %d: %s", w.Code, rejected, tc.want, tc.wantRejected, msg)
			}
			if !strings.Contains(msg, tc.wantText) {
				t.Errorf("message %q does not mention %q", msg, tc.wantText)
			}
			if ct := w.Header().Get("Content-Type"); w.Code != 415 && ct != tc.ct {
				t.Errorf("answered in %q, asked in %q", ct, tc.ct)
			}
			_, values := p.records()
			if got := len(decodeRecords(t, values)); got != tc.wantSeries {
				t.Errorf("%d series produced, want %d", got, tc.wantSeries)
			}
			if n := g.inflight.bytes(); n != 0 {
				t.Errorf("%d in-flight bytes still held after the answer", n)
			}
		})
	}
}

// TestAnExponentialHistogramWithAnOffsetNear2To31IsRefusedWithinBoundedMemory:
// a bucket offset of 2^31-2 with four buckets is a span whose end is past
// int32, which the TSDB would refuse: the series is refused, and said so
// in partial_success, with target_info kept. The request allocates in
// proportion to its size, not its offset.
func TestAnExponentialHistogramWithAnOffsetNear2To31IsRefusedWithinBoundedMemory(t *testing.T) {
	for _, tc := range []struct {
		offset       int32
		wantRejected int64
	}{
		{offset: math.MaxInt32 - 1, wantRejected: 1}, // the pusher's histogram check refuses it
		{offset: math.MinInt32 + 1},                  // a span within int32: stored
	} {
		offset := tc.offset
		t.Run(fmt.Sprint(offset), func(t *testing.T) {
			body := protoBody(t, otlpRequest(func(ms pmetric.MetricSlice) {
				m := ms.AppendEmpty()
				m.SetName("latency")
				h := m.SetEmptyExponentialHistogram()
				h.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
				dp := h.DataPoints().AppendEmpty()
				dp.SetTimestamp(otlpNow())
				dp.SetScale(0)
				dp.SetCount(4)
				dp.SetSum(10)
				dp.Positive().SetOffset(offset)
				dp.Positive().BucketCounts().FromRaw([]uint64{1, 1, 1, 1})
				dp.Negative().SetOffset(offset)
				dp.Negative().BucketCounts().FromRaw([]uint64{0})
			}))
			p := &fakeProducer{}
			g := newTestGateway(t, p, nil)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			w := postOTLP(t, g, otlpProtobuf, "", body)
			runtime.ReadMemStats(&after)
			rejected, msg := answer(t, w)
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("offset %d: status %d, %d rejected, %q; %d bytes allocated for a body of %d", offset, w.Code, rejected, msg, allocated, len(body))
			if w.Code != 200 || rejected != tc.wantRejected {
				t.Fatalf("status %d with %d rejected, want 200 with %d: %s", w.Code, rejected, tc.wantRejected, msg)
			}
			if allocated > 4<<20 {
				t.Errorf("%d bytes allocated for a %d-byte body", allocated, len(body))
			}
			_, values := p.records()
			if got, want := len(decodeRecords(t, values)), 2-int(tc.wantRejected); got != want {
				t.Errorf("%d series produced, want %d (target_info and the histogram unless refused)", got, want)
			}
		})
	}
}

// TestAnExportOfMoreSeriesThanTheLimitPerRequestIsProducedInChunks: one
// OTLP histogram point is a series per bucket, so an SDK's export is
// easily more series than -limits.max-series-per-request, which the
// pusher applies to a record: the translated request is taken in chunks
// under it, every series produced, none refused.
func TestAnExportOfMoreSeriesThanTheLimitPerRequestIsProducedInChunks(t *testing.T) {
	t.Parallel()
	paths := make([]string, 40)
	for i := range paths {
		paths[i] = fmt.Sprint("/", i)
	}
	p := &fakeProducer{}
	g := newTestGateway(t, p, func(c *Config) { c.Limits.MaxSeriesPerRequest = 16 })
	w := postOTLP(t, g, otlpProtobuf, "", protoBody(t, otlpRequest(func(ms pmetric.MetricSlice) { gauge(ms, "up", paths...) })))
	if rejected, msg := answer(t, w); w.Code != 200 || rejected != 0 {
		t.Fatalf("status %d with %d rejected: %s", w.Code, rejected, msg)
	}
	_, values := p.records()
	for i, v := range values {
		var req prompb.WriteRequest
		if err := req.Unmarshal(v); err != nil || len(req.Timeseries) > 16 {
			t.Errorf("record %d: %d series, %v", i, len(req.Timeseries), err)
		}
	}
	if got := len(decodeRecords(t, values)); got != 41 {
		t.Errorf("%d series in %d records, want 41 (40 and target_info)", got, len(values))
	}
}

// TestAnOTLPClientIsToldToRetryOnlyWhenARetryCanSucceed: over the
// tenant's rate, 429 with Retry-After, taking none of the request; Kafka
// not acknowledging, 503 with Retry-After; a request over the burst,
// which no retry can pass, 413.
func TestAnOTLPClientIsToldToRetryOnlyWhenARetryCanSucceed(t *testing.T) {
	t.Parallel()
	body := protoBody(t, otlpRequest(func(ms pmetric.MetricSlice) { gauge(ms, "up", "a", "b", "c") })) // 3 points and target_info
	limited := func(c *Config) { c.TenantRateLimit = 0.001; c.TenantBurst = 6 }
	p := &fakeProducer{}
	g := newTestGateway(t, p, limited)
	if w := postOTLP(t, g, otlpProtobuf, "", body); w.Code != 200 {
		t.Fatalf("the first export: status %d", w.Code)
	}
	w := postOTLP(t, g, otlpProtobuf, "", body)
	if _, msg := answer(t, w); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Errorf("over the rate: status %d, Retry-After %q: %s", w.Code, w.Header().Get("Retry-After"), msg)
	}
	if _, values := p.records(); len(values) != 1 {
		t.Errorf("%d records, want the first export's only", len(values))
	}
	g = newTestGateway(t, p, func(c *Config) { c.TenantRateLimit = 0.001; c.TenantBurst = 3 })
	if w := postOTLP(t, g, otlpProtobuf, "", body); w.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("over the burst: status %d, want 413", w.Code)
	}
	g = newTestGateway(t, &fakeProducer{err: context.DeadlineExceeded}, nil)
	w = postOTLP(t, g, otlpProtobuf, "", body)
	if _, msg := answer(t, w); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("Kafka down: status %d, Retry-After %q: %s", w.Code, w.Header().Get("Retry-After"), msg)
	}
}
