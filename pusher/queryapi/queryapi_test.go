package queryapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// base is the timestamp, in milliseconds, of the first test sample. A fixed
// instant keeps expected timestamps exact.
const base int64 = 1_700_000_000_000

const (
	step    = 15 * time.Second
	samples = 241 // One hour at 15s, both ends included.
)

// testSource serves one real TSDB per tenant; unknown tenants get an empty
// queryable, as the pusher's store does. It records the tenants asked for
// so tests can check that a request touched only its own.
type testSource struct {
	dbs  map[string]*tsdb.DB
	meta map[string]map[string]prompb.MetricMetadata

	mu    sync.Mutex
	asked []string
}

func (s *testSource) Queryable(tenant string) storage.Queryable {
	s.mu.Lock()
	s.asked = append(s.asked, tenant)
	s.mu.Unlock()
	if db, ok := s.dbs[tenant]; ok {
		return db
	}
	return emptyQueryable{}
}

func (s *testSource) ExemplarQueryable(tenant string) storage.ExemplarQueryable {
	s.mu.Lock()
	s.asked = append(s.asked, tenant)
	s.mu.Unlock()
	if db, ok := s.dbs[tenant]; ok {
		return db
	}
	return s.dbs["empty"]
}

func (s *testSource) Metadata(tenant string) map[string]prompb.MetricMetadata {
	s.mu.Lock()
	s.asked = append(s.asked, tenant)
	s.mu.Unlock()
	return maps.Clone(s.meta[tenant])
}

func (s *testSource) tenantsAsked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.asked)
}

type emptyQueryable struct{}

func (emptyQueryable) Querier(int64, int64) (storage.Querier, error) {
	return storage.NoopQuerier(), nil
}

func openDB(t *testing.T) *tsdb.DB {
	t.Helper()
	opts := tsdb.DefaultOptions()
	opts.EnableExemplarStorage = true
	opts.MaxExemplars = 100
	db, err := tsdb.Open(t.TempDir(), nil, nil, opts, nil)
	if err != nil {
		t.Fatalf("tsdb.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("closing tsdb: %v", err)
		}
	})
	return db
}

// testHistogram is a native histogram with a zero bucket and two positive
// buckets: (0.5,1] holding 2 and (1,2] holding 2.
func testHistogram() *histogram.Histogram {
	return &histogram.Histogram{
		Schema:          0,
		ZeroThreshold:   0.001,
		ZeroCount:       1,
		Count:           5,
		Sum:             10,
		PositiveSpans:   []histogram.Span{{Offset: 0, Length: 2}},
		PositiveBuckets: []int64{2, 0}, // Delta encoded: 2, 2.
	}
}

// i1Value and i2Value are the values appended for sample i of the two
// ferry_test_metric series.
func i1Value(i int) float64 { return float64(i) }
func i2Value(i int) float64 { return float64(2 * i) }

func sampleTime(i int) int64 { return base + int64(i)*step.Milliseconds() }

// newSource builds tenant "alpha" with two float series of one hour, one
// single-sample series and one native histogram series, and tenant "beta"
// with a single series of its own.
func newSource(t *testing.T) *testSource {
	t.Helper()
	ctx := context.Background()

	alpha := openDB(t)
	app := alpha.Appender(ctx)
	i1 := labels.FromStrings("__name__", "ferry_test_metric", "job", "a", "instance", "i1")
	i2 := labels.FromStrings("__name__", "ferry_test_metric", "job", "a", "instance", "i2")
	for i := range samples {
		if _, err := app.Append(0, i1, sampleTime(i), i1Value(i)); err != nil {
			t.Fatal(err)
		}
		if _, err := app.Append(0, i2, sampleTime(i), i2Value(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := app.Append(0, labels.FromStrings("__name__", "other_metric", "env", "prod"), base, 42); err != nil {
		t.Fatal(err)
	}
	if _, err := app.AppendHistogram(0, labels.FromStrings("__name__", "ferry_test_hist", "env", "prod"), base, testHistogram(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := app.AppendExemplar(0, i1, exemplar.Exemplar{Labels: labels.FromStrings("trace_id", "abc"), Value: 3.5, Ts: base + 1500, HasTs: true}); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}

	beta := openDB(t)
	app = beta.Appender(ctx)
	if _, err := app.Append(0, labels.FromStrings("__name__", "beta_only", "team", "b"), base, 7); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	meta := map[string]map[string]prompb.MetricMetadata{"alpha": {
		"ferry_test_metric": {MetricFamilyName: "ferry_test_metric", Type: prompb.MetricMetadata_METRIC_TYPE_COUNTER, Help: "A test counter.", Unit: "seconds"},
		"other_metric":      {MetricFamilyName: "other_metric", Type: prompb.MetricMetadata_METRIC_TYPE_GAUGE, Help: "Another."},
	}}
	return &testSource{dbs: map[string]*tsdb.DB{"alpha": alpha, "beta": beta, "empty": openDB(t)}, meta: meta}
}

func testConfig() Config {
	return Config{Timeout: time.Minute, MaxSamples: 50_000_000, LookbackDelta: 5 * time.Minute, MaxConcurrency: 4,
		MaxExpressionBytes: 256 << 10, MaxExpressionTokens: 10_000, MaxExpressionDepth: 128}
}

type testEnv struct {
	api *API
	src *testSource
	srv *httptest.Server
	reg *prometheus.Registry
}

func newEnv(t *testing.T, cfg Config) *testEnv {
	t.Helper()
	src := newSource(t)
	reg := prometheus.NewRegistry()
	a, err := New(cfg, src, nil, reg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	mux := http.NewServeMux()
	a.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &testEnv{api: a, src: src, srv: srv, reg: reg}
}

// response is the envelope of every API answer.
type response struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Warnings  []string        `json:"warnings"`
	Infos     []string        `json:"infos"`
}

type queryResult struct {
	ResultType string          `json:"resultType"`
	Result     json.RawMessage `json:"result"`
}

type vectorSample struct {
	Metric    map[string]string `json:"metric"`
	Value     []json.RawMessage `json:"value"`
	Histogram []json.RawMessage `json:"histogram"`
}

type matrixSeries struct {
	Metric     map[string]string   `json:"metric"`
	Values     [][]json.RawMessage `json:"values"`
	Histograms [][]json.RawMessage `json:"histograms"`
}

type jsonHistogram struct {
	Count   string              `json:"count"`
	Sum     string              `json:"sum"`
	Buckets [][]json.RawMessage `json:"buckets"`
}

// do sends a request as tenant (none if empty) and decodes the envelope.
// POST sends params as a form body, GET in the URL.
func (e *testEnv) do(t *testing.T, method, tenant, path string, params url.Values) (int, response, string) {
	t.Helper()
	var req *http.Request
	var err error
	if method == http.MethodPost {
		req, err = http.NewRequest(method, e.srv.URL+path, strings.NewReader(params.Encode()))
		if err == nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
	} else {
		u := e.srv.URL + path
		if len(params) > 0 {
			u += "?" + params.Encode()
		}
		req, err = http.NewRequest(method, u, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	if tenant != "" {
		req.Header.Set(TenantHeader, tenant)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	var r response
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("%s %s: decoding %q: %v", method, path, body, err)
	}
	return resp.StatusCode, r, string(body)
}

// get is do with GET that fails the test unless the request succeeded.
func (e *testEnv) get(t *testing.T, tenant, path string, params url.Values) response {
	t.Helper()
	code, r, body := e.do(t, http.MethodGet, tenant, path, params)
	if code != http.StatusOK || r.Status != "success" {
		t.Fatalf("GET %s %v: %d %s", path, params, code, body)
	}
	return r
}

func decode[T any](t *testing.T, raw json.RawMessage) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decoding %s as %T: %v", raw, v, err)
	}
	return v
}

// point decodes a [<unix seconds>, "<value>"] pair into milliseconds and
// the value string.
func point(t *testing.T, p []json.RawMessage) (int64, string) {
	t.Helper()
	if len(p) != 2 {
		t.Fatalf("point %s has %d elements, want 2", p, len(p))
	}
	sec, err := strconv.ParseFloat(string(p[0]), 64)
	if err != nil {
		t.Fatalf("timestamp %s: %v", p[0], err)
	}
	return int64(math.Round(sec * 1000)), decode[string](t, p[1])
}

func seconds(ms int64) string { return strconv.FormatFloat(float64(ms)/1000, 'f', -1, 64) }

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func instant(t *testing.T, e *testEnv, tenant, query string, ts int64) (string, json.RawMessage) {
	t.Helper()
	r := e.get(t, tenant, "/api/v1/query", url.Values{"query": {query}, "time": {seconds(ts)}})
	qr := decode[queryResult](t, r.Data)
	return qr.ResultType, qr.Result
}

func TestInstantQueryReturnsAppendedValue(t *testing.T) {
	e := newEnv(t, testConfig())
	const i = 120
	ts := sampleTime(i)
	typ, raw := instant(t, e, "alpha", `ferry_test_metric{instance="i1"}`, ts)
	if typ != "vector" {
		t.Fatalf("resultType %q, want vector", typ)
	}
	vec := decode[[]vectorSample](t, raw)
	if len(vec) != 1 {
		t.Fatalf("got %d samples, want 1: %s", len(vec), raw)
	}
	want := map[string]string{"__name__": "ferry_test_metric", "job": "a", "instance": "i1"}
	if fmt.Sprint(vec[0].Metric) != fmt.Sprint(want) {
		t.Errorf("metric %v, want %v", vec[0].Metric, want)
	}
	gotT, gotV := point(t, vec[0].Value)
	if gotT != ts || gotV != fmtFloat(i1Value(i)) {
		t.Errorf("value [%d, %q], want [%d, %q]", gotT, gotV, ts, fmtFloat(i1Value(i)))
	}
}

// TestExactVectorJSON pins the byte layout: label keys sorted, the
// timestamp in seconds with a three-digit fraction, the value a string.
func TestExactVectorJSON(t *testing.T) {
	e := newEnv(t, testConfig())
	_, _, body := e.do(t, http.MethodGet, "alpha", "/api/v1/query", url.Values{"query": {"other_metric"}, "time": {"1700000000.5"}})
	want := `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"other_metric","env":"prod"},"value":[1700000000.500,"42"]}]}}`
	if body != want {
		t.Errorf("body\n%s\nwant\n%s", body, want)
	}
}

func TestOverTimeFunctions(t *testing.T) {
	e := newEnv(t, testConfig())
	const end = 120
	ts := sampleTime(end)
	// Range selectors are left-open: (ts-5m, ts].
	var count, sum float64
	for i := range samples {
		if st := sampleTime(i); st > ts-5*time.Minute.Milliseconds() && st <= ts {
			count++
			sum += i1Value(i)
		}
	}
	if count != 20 {
		t.Fatalf("test setup: %v samples in the window, want 20", count)
	}
	for _, tc := range []struct {
		query string
		want  float64
	}{
		{`count_over_time(ferry_test_metric{instance="i1"}[5m])`, count},
		{`sum_over_time(ferry_test_metric{instance="i1"}[5m])`, sum},
		{`sum(sum_over_time(ferry_test_metric[5m]))`, 3 * sum}, // i2 is twice i1.
	} {
		_, raw := instant(t, e, "alpha", tc.query, ts)
		vec := decode[[]vectorSample](t, raw)
		if len(vec) != 1 {
			t.Fatalf("%s: got %d samples, want 1: %s", tc.query, len(vec), raw)
		}
		if _, ok := vec[0].Metric["__name__"]; ok {
			t.Errorf("%s: result keeps __name__: %v", tc.query, vec[0].Metric)
		}
		if _, v := point(t, vec[0].Value); v != fmtFloat(tc.want) {
			t.Errorf("%s = %s, want %v", tc.query, v, tc.want)
		}
	}
}

func TestRangeQuery(t *testing.T) {
	e := newEnv(t, testConfig())
	start, end := sampleTime(40), sampleTime(48) // 10m to 12m.
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		params := url.Values{
			"query": {`ferry_test_metric{instance="i2"}`},
			// One RFC 3339 and one float bound, as promtool and Grafana send.
			"start": {time.UnixMilli(start).UTC().Format(time.RFC3339)},
			"end":   {seconds(end)},
			"step":  {"1m"},
		}
		code, r, body := e.do(t, method, "alpha", "/api/v1/query_range", params)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", method, code, body)
		}
		qr := decode[queryResult](t, r.Data)
		if qr.ResultType != "matrix" {
			t.Fatalf("%s: resultType %q, want matrix", method, qr.ResultType)
		}
		m := decode[[]matrixSeries](t, qr.Result)
		if len(m) != 1 || m[0].Metric["instance"] != "i2" {
			t.Fatalf("%s: got %s", method, qr.Result)
		}
		if len(m[0].Values) != 3 {
			t.Fatalf("%s: %d points, want 3: %s", method, len(m[0].Values), qr.Result)
		}
		for k, p := range m[0].Values {
			i := 40 + 4*k // One minute is four samples.
			gotT, gotV := point(t, p)
			if gotT != sampleTime(i) || gotV != fmtFloat(i2Value(i)) {
				t.Errorf("%s: point %d = [%d, %q], want [%d, %q]", method, k, gotT, gotV, sampleTime(i), fmtFloat(i2Value(i)))
			}
		}
		if m[0].Histograms != nil {
			t.Errorf("%s: float series has histograms: %s", method, qr.Result)
		}
	}
}

func TestScalarAndStringResults(t *testing.T) {
	e := newEnv(t, testConfig())
	_, _, body := e.do(t, http.MethodGet, "alpha", "/api/v1/query", url.Values{"query": {"1+1"}, "time": {"1700000000.25"}})
	if want := `{"status":"success","data":{"resultType":"scalar","result":[1700000000.25,"2"]}}`; body != want {
		t.Errorf("scalar body %s, want %s", body, want)
	}
	_, _, body = e.do(t, http.MethodGet, "alpha", "/api/v1/query", url.Values{"query": {`"a<b"`}, "time": {"1700000000"}})
	if want := `{"status":"success","data":{"resultType":"string","result":[1700000000,"a\u003cb"]}}`; body != want {
		t.Errorf("string body %s, want %s", body, want)
	}
	for q, want := range map[string]string{"NaN": "NaN", "1/0": "+Inf", "-1/0": "-Inf"} {
		_, raw := instant(t, e, "alpha", q, base)
		if _, v := point(t, decode[[]json.RawMessage](t, raw)); v != want {
			t.Errorf("%s = %q, want %q", q, v, want)
		}
	}
}

func TestNativeHistogram(t *testing.T) {
	e := newEnv(t, testConfig())
	wantBuckets := `[[3,"-0.001","0.001","1"],[0,"0.5","1","2"],[0,"1","2","2"]]`
	check := func(what string, h jsonHistogram) {
		t.Helper()
		if h.Count != "5" || h.Sum != "10" {
			t.Errorf("%s: count %q sum %q, want 5 and 10", what, h.Count, h.Sum)
		}
		b, _ := json.Marshal(h.Buckets)
		if string(b) != wantBuckets {
			t.Errorf("%s: buckets %s, want %s", what, b, wantBuckets)
		}
	}

	_, raw := instant(t, e, "alpha", "ferry_test_hist", base)
	vec := decode[[]vectorSample](t, raw)
	if len(vec) != 1 || vec[0].Value != nil || len(vec[0].Histogram) != 2 {
		t.Fatalf("instant histogram: %s", raw)
	}
	check("instant", decode[jsonHistogram](t, vec[0].Histogram[1]))

	r := e.get(t, "alpha", "/api/v1/query_range", url.Values{
		"query": {"ferry_test_hist"}, "start": {seconds(base)}, "end": {seconds(base + 60_000)}, "step": {"30"},
	})
	m := decode[[]matrixSeries](t, decode[queryResult](t, r.Data).Result)
	if len(m) != 1 || m[0].Values != nil || len(m[0].Histograms) != 3 {
		t.Fatalf("range histogram: %s", r.Data)
	}
	for _, p := range m[0].Histograms {
		check("range", decode[jsonHistogram](t, p[1]))
	}
}

func TestInfosAreReported(t *testing.T) {
	e := newEnv(t, testConfig())
	// rate() over a name without a counter suffix yields a PromQL info.
	r := e.get(t, "alpha", "/api/v1/query", url.Values{"query": {"rate(ferry_test_metric[5m])"}, "time": {seconds(sampleTime(100))}})
	if len(r.Infos) == 0 || !strings.Contains(r.Infos[0], "might not be a counter") {
		t.Errorf("infos %q, want the possible-non-counter info", r.Infos)
	}
}

func TestSeries(t *testing.T) {
	e := newEnv(t, testConfig())
	r := e.get(t, "alpha", "/api/v1/series", url.Values{"match[]": {"ferry_test_metric"}})
	got := decode[[]map[string]string](t, r.Data)
	want := []map[string]string{
		{"__name__": "ferry_test_metric", "instance": "i1", "job": "a"},
		{"__name__": "ferry_test_metric", "instance": "i2", "job": "a"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("series %v, want %v", got, want)
	}

	// Overlapping selectors return each series once.
	r = e.get(t, "alpha", "/api/v1/series", url.Values{
		"match[]": {`ferry_test_metric{instance="i1"}`, `{job="a"}`, "other_metric"},
		"start":   {seconds(base)}, "end": {seconds(base + 3600_000)},
	})
	if got := decode[[]map[string]string](t, r.Data); len(got) != 3 {
		t.Errorf("union of selectors: %v, want 3 series", got)
	}

	r = e.get(t, "alpha", "/api/v1/series", url.Values{"match[]": {"ferry_test_metric"}, "limit": {"1"}})
	if got := decode[[]map[string]string](t, r.Data); len(got) != 1 || len(r.Warnings) != 1 {
		t.Errorf("limit 1: %v with warnings %q, want 1 series and a truncation warning", got, r.Warnings)
	}

	r = e.get(t, "alpha", "/api/v1/series", url.Values{"match[]": {"no_such_metric"}})
	if string(r.Data) != "[]" {
		t.Errorf("no match: data %s, want []", r.Data)
	}
}

func TestLabels(t *testing.T) {
	e := newEnv(t, testConfig())
	for _, tc := range []struct {
		path   string
		params url.Values
		want   []string
	}{
		{"/api/v1/labels", nil, []string{"__name__", "env", "instance", "job"}},
		{"/api/v1/labels", url.Values{"match[]": {"other_metric"}}, []string{"__name__", "env"}},
		{"/api/v1/labels", url.Values{"match[]": {"other_metric", `{instance="i1"}`}}, []string{"__name__", "env", "instance", "job"}},
		{"/api/v1/label/__name__/values", nil, []string{"ferry_test_hist", "ferry_test_metric", "other_metric"}},
		{"/api/v1/label/instance/values", nil, []string{"i1", "i2"}},
		{"/api/v1/label/env/values", url.Values{"match[]": {"ferry_test_hist"}}, []string{"prod"}},
		{"/api/v1/label/no_such_label/values", nil, []string{}},
		{"/api/v1/label/__name__/values", url.Values{"limit": {"2"}}, []string{"ferry_test_hist", "ferry_test_metric"}},
	} {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			code, r, body := e.do(t, method, "alpha", tc.path, tc.params)
			if code != http.StatusOK {
				t.Errorf("%s %s %v: %d %s", method, tc.path, tc.params, code, body)
				continue
			}
			if got := decode[[]string](t, r.Data); !slices.Equal(got, tc.want) || got == nil {
				t.Errorf("%s %s %v = %s, want %q", method, tc.path, tc.params, r.Data, tc.want)
			}
		}
	}
}

func TestMissingTenant(t *testing.T) {
	e := newEnv(t, testConfig())
	for _, path := range []string{"/api/v1/query", "/api/v1/query_range", "/api/v1/series", "/api/v1/labels", "/api/v1/label/job/values"} {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			code, r, body := e.do(t, method, "", path, url.Values{"query": {"up"}, "match[]": {"up"}})
			if code != http.StatusUnauthorized || r.Status != "error" || r.ErrorType != "unauthorized" ||
				r.Error != "missing X-Scope-OrgID header: set it to the tenant ID to query" {
				t.Errorf("%s %s without tenant: %d %s", method, path, code, body)
			}
		}
	}
	if asked := e.src.tenantsAsked(); len(asked) != 0 {
		t.Errorf("storage was opened for %q without a tenant", asked)
	}
}

func TestTenantIsolation(t *testing.T) {
	e := newEnv(t, testConfig())
	ts := sampleTime(10)
	for _, tenant := range []string{"beta", "gamma"} { // gamma never wrote.
		if typ, raw := instant(t, e, tenant, "ferry_test_metric", ts); typ != "vector" || string(raw) != "[]" {
			t.Errorf("%s: alpha's metric gave %s %s, want an empty vector", tenant, typ, raw)
		}
		r := e.get(t, tenant, "/api/v1/query_range", url.Values{"query": {"ferry_test_metric"}, "start": {seconds(base)}, "end": {seconds(ts)}, "step": {"15"}})
		if qr := decode[queryResult](t, r.Data); string(qr.Result) != "[]" {
			t.Errorf("%s: range over alpha's metric gave %s", tenant, qr.Result)
		}
		r = e.get(t, tenant, "/api/v1/series", url.Values{"match[]": {"ferry_test_metric"}})
		if string(r.Data) != "[]" {
			t.Errorf("%s: series of alpha's metric = %s", tenant, r.Data)
		}
		r = e.get(t, tenant, "/api/v1/label/instance/values", nil)
		if string(r.Data) != "[]" {
			t.Errorf("%s: alpha's label values = %s", tenant, r.Data)
		}
	}
	r := e.get(t, "beta", "/api/v1/label/__name__/values", nil)
	if got := decode[[]string](t, r.Data); !slices.Equal(got, []string{"beta_only"}) {
		t.Errorf("beta's names = %q, want only beta_only", got)
	}
	r = e.get(t, "beta", "/api/v1/labels", nil)
	if got := decode[[]string](t, r.Data); !slices.Equal(got, []string{"__name__", "team"}) {
		t.Errorf("beta's label names = %q", got)
	}
	if _, raw := instant(t, e, "alpha", "beta_only", base); string(raw) != "[]" {
		t.Errorf("alpha sees beta's metric: %s", raw)
	}
	for _, tenant := range e.src.tenantsAsked() {
		if tenant != "alpha" && tenant != "beta" && tenant != "gamma" {
			t.Errorf("storage opened for unexpected tenant %q", tenant)
		}
	}
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t, testConfig())
	for _, tc := range []struct {
		name, path string
		params     url.Values
		wantMsg    string
	}{
		{"parse error", "/api/v1/query", url.Values{"query": {"sum(ferry_test_metric"}}, `invalid parameter "query"`},
		{"empty query", "/api/v1/query", url.Values{}, `invalid parameter "query"`},
		{"bad time", "/api/v1/query", url.Values{"query": {"1"}, "time": {"yesterday"}}, `invalid parameter "time"`},
		{"bad timeout", "/api/v1/query", url.Values{"query": {"1"}, "timeout": {"soon"}}, `invalid parameter "timeout"`},
		{"range of matrix", "/api/v1/query_range", url.Values{"query": {"ferry_test_metric[5m]"}, "start": {"0"}, "end": {"60"}, "step": {"15"}}, "invalid expression type"},
		{"missing start", "/api/v1/query_range", url.Values{"query": {"1"}, "end": {"60"}, "step": {"15"}}, `invalid parameter "start"`},
		{"end before start", "/api/v1/query_range", url.Values{"query": {"1"}, "start": {"60"}, "end": {"0"}, "step": {"15"}}, "end timestamp must not be before start time"},
		{"zero step", "/api/v1/query_range", url.Values{"query": {"1"}, "start": {"0"}, "end": {"60"}, "step": {"0"}}, "zero or negative query resolution step"},
		{"bad step", "/api/v1/query_range", url.Values{"query": {"1"}, "start": {"0"}, "end": {"60"}, "step": {"often"}}, `invalid parameter "step"`},
		{"too many points", "/api/v1/query_range", url.Values{"query": {"1"}, "start": {"0"}, "end": {"11001"}, "step": {"1s"}}, "exceeded maximum resolution of 11,000 points per timeseries"},
		{"series without match", "/api/v1/series", url.Values{}, "no match[] parameter provided"},
		{"series bad match", "/api/v1/series", url.Values{"match[]": {"{"}}, `invalid parameter "match[]"`},
		{"series empty matcher", "/api/v1/series", url.Values{"match[]": {`{job=~".*"}`}}, "at least one non-empty matcher"},
		{"labels bad match", "/api/v1/labels", url.Values{"match[]": {"{"}}, ""},
		{"labels bad start", "/api/v1/labels", url.Values{"start": {"x"}}, `invalid parameter "start"`},
		{"bad limit", "/api/v1/labels", url.Values{"limit": {"-1"}}, `invalid parameter "limit"`},
	} {
		code, r, body := e.do(t, http.MethodGet, "alpha", tc.path, tc.params)
		if code != http.StatusBadRequest || r.Status != "error" || r.ErrorType != "bad_data" || !strings.Contains(r.Error, tc.wantMsg) {
			t.Errorf("%s: %d %s, want 400 bad_data containing %q", tc.name, code, body, tc.wantMsg)
		}
	}
	// Exactly 11,000 steps is still allowed.
	e.get(t, "alpha", "/api/v1/query_range", url.Values{"query": {"1"}, "start": {"0"}, "end": {"11000"}, "step": {"1"}})
}

func TestExecutionErrors(t *testing.T) {
	cfg := testConfig()
	cfg.MaxSamples = 10
	e := newEnv(t, cfg)
	code, r, body := e.do(t, http.MethodGet, "alpha", "/api/v1/query", url.Values{"query": {"ferry_test_metric[1h]"}, "time": {seconds(sampleTime(samples - 1))}})
	if code != http.StatusUnprocessableEntity || r.ErrorType != "execution" {
		t.Errorf("over max samples: %d %s, want 422 execution", code, body)
	}
	// A timeout that has passed before evaluation starts.
	code, r, body = e.do(t, http.MethodGet, "alpha", "/api/v1/query", url.Values{"query": {"ferry_test_metric"}, "timeout": {"0.000000001"}})
	if code != http.StatusServiceUnavailable || r.ErrorType != "timeout" {
		t.Errorf("expired timeout: %d %s, want 503 timeout", code, body)
	}
}

func TestMethodNotAllowed(t *testing.T) {
	e := newEnv(t, testConfig())
	req, _ := http.NewRequest(http.MethodDelete, e.srv.URL+"/api/v1/query", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("DELETE: %d, want 405", resp.StatusCode)
	}
}

func TestBuildInfo(t *testing.T) {
	e := newEnv(t, testConfig())
	r := e.get(t, "", "/api/v1/status/buildinfo", nil)
	bi := decode[map[string]string](t, r.Data)
	if !strings.HasPrefix(bi["version"], "3.") || bi["goVersion"] == "" {
		t.Errorf("build info %v", bi)
	}
	for in, want := range map[string]string{"v0.316.0": "3.16.0", "v0.300.1": "3.0.1", "v0.310.0-rc.1": "3.10.0"} {
		if got, ok := prometheusRelease(in); !ok || got != want {
			t.Errorf("prometheusRelease(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	if _, ok := prometheusRelease("v2.0.0"); ok {
		t.Error("prometheusRelease accepted v2.0.0")
	}
}

func TestRequestMetrics(t *testing.T) {
	e := newEnv(t, testConfig())
	e.get(t, "alpha", "/api/v1/query", url.Values{"query": {"1"}})
	e.do(t, http.MethodGet, "", "/api/v1/query", url.Values{"query": {"1"}})
	e.do(t, http.MethodGet, "alpha", "/api/v1/series", nil)
	for _, tc := range []struct {
		endpoint, code string
	}{{"query", "200"}, {"query", "401"}, {"series", "400"}} {
		if got := testutil.ToFloat64(e.api.requests.WithLabelValues(tc.endpoint, tc.code)); got != 1 {
			t.Errorf("requests{endpoint=%q,code=%q} = %v, want 1", tc.endpoint, tc.code, got)
		}
	}
	if n, err := testutil.GatherAndCount(e.reg, "ferry_pusher_query_request_duration_seconds", "prometheus_engine_queries"); err != nil || n != 3 {
		t.Errorf("gathered %d series (%v), want 2 duration histograms and the engine gauge", n, err)
	}
	if _, err := New(testConfig(), e.src, nil, e.reg); err == nil {
		t.Error("second New on the same registry succeeded")
	}
}

func TestConcurrentQueries(t *testing.T) {
	e := newEnv(t, testConfig())
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			tenant := []string{"alpha", "beta"}[g%2]
			r := e.get(t, tenant, "/api/v1/query", url.Values{"query": {"count({__name__=~\".+\"})"}, "time": {seconds(base)}})
			vec := decode[[]vectorSample](t, decode[queryResult](t, r.Data).Result)
			want := map[string]string{"alpha": "4", "beta": "1"}[tenant] // Series with a sample at base.
			if len(vec) != 1 {
				t.Errorf("%s: %s", tenant, r.Data)
				return
			}
			if _, v := point(t, vec[0].Value); v != want {
				t.Errorf("%s: count = %s, want %s", tenant, v, want)
			}
		})
	}
	wg.Wait()
}

// TestInvalidTenant holds the query header to the tenant-ID rule shared by
// every entry point (internal/tenant): an ID that could be written but is
// invalid is refused before any storage is opened.
func TestInvalidTenant(t *testing.T) {
	e := newEnv(t, testConfig())
	for _, tenant := range []string{"a/b", "..", "a\\b", strings.Repeat("x", 151), "tenant-é", "a b"} {
		code, r, body := e.do(t, http.MethodGet, tenant, "/api/v1/query", url.Values{"query": {"up"}})
		if code != http.StatusBadRequest || r.ErrorType != "bad_data" || !strings.Contains(r.Error, "invalid tenant ID") {
			t.Errorf("tenant %q: %d %s", tenant, code, body)
		}
	}
	if asked := e.src.tenantsAsked(); len(asked) != 0 {
		t.Errorf("storage was opened for %q", asked)
	}
}
