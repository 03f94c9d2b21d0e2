package integration

// Real clients of the query side: Debian's Prometheus reading Ferry through
// remote_read, promtool querying the HTTP API, and the exemplar and
// metadata endpoints across a pusher restart. Prometheus 2.42 and promtool
// send no X-Scope-OrgID header, so these pushers run with
// -query.default-tenant.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/poll"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/queryapi"
)

// defaultTenant is the tenant of requests without X-Scope-OrgID here.
const defaultTenant = "ferry"

// requireBinary returns the path of a client the test runs; without it
// the test skips, or fails under CI=true where .ci/run installs it.
func requireBinary(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is required under CI=true (Debian package prometheus): %v", name, err)
		}
		t.Skipf("%s not installed (Debian package prometheus): %v", name, err)
	}
	return path
}

// startQueryPusher starts a pusher on dir whose queries default to
// defaultTenant, with modify applied to its configuration.
func startQueryPusher(t *testing.T, dir string, modify func(*queryapi.Config)) *pusherProc {
	t.Helper()
	cfg := pusherConfig(t, dir)
	cfg.Query.DefaultTenant = defaultTenant
	// Exemplar storage is off by default; the query tests read exemplars
	// back.
	cfg.TSDB.MaxExemplars = 100_000
	if modify != nil {
		modify(&cfg.Query)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return startPusher(t, cfg)
}

// pushOne applies wr as tenant through the pusher's gRPC PushOne and
// fails unless it is answered OK.
func pushOne(t *testing.T, p *pusherProc, tenant string, wr *prompb.WriteRequest) {
	t.Helper()
	if resp := pushOneAnswer(t, p, tenant, wr); resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
		t.Fatalf("PushOne answered %v: %s", resp.Status, resp.Reason)
	}
}

// seriesRequest is n series rr_metric{instance="i<k>"} of steps samples
// every 15 s from start; sample j of series k is k*1000+j.
func seriesRequest(name string, n, steps int, start int64) *prompb.WriteRequest {
	wr := &prompb.WriteRequest{}
	for k := range n {
		ts := prompb.TimeSeries{Labels: []prompb.Label{
			{Name: "__name__", Value: name}, {Name: "instance", Value: fmt.Sprintf("i%d", k)}, {Name: "job", Value: "rr"},
		}}
		for j := range steps {
			ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: start + int64(j)*15_000, Value: float64(k*1000 + j)})
		}
		wr.Timeseries = append(wr.Timeseries, ts)
	}
	return wr
}

// apiAnswer is the envelope of a Prometheus API answer, data kept raw.
type apiAnswer struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Warnings  []string        `json:"warnings"`
}

// getAPI sends GET base+path?params, as tenant unless it is empty, and
// decodes the API's JSON answer.
func getAPI(t *testing.T, base, tenant, path string, params url.Values) (int, apiAnswer) {
	t.Helper()
	raw := getRaw(t, base, tenant, path, params)
	var a apiAnswer
	if err := json.Unmarshal(raw.body, &a); err != nil {
		t.Fatalf("GET %s: HTTP %d %q: %v", path, raw.status, raw.body, err)
	}
	return raw.status, a
}

// getRaw sends GET base+path?params, as tenant unless it is empty, and
// returns the answer undecoded.
func getRaw(t *testing.T, base, tenant, path string, params url.Values) rawAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path+"?"+params.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if tenant != "" {
		req.Header.Set(queryapi.TenantHeader, tenant)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return rawAnswer{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), body: body}
}

// normalized re-encodes a query result with its series sorted, so that two
// servers' answers compare equal whatever order each listed series in.
func normalized(t *testing.T, data json.RawMessage) string {
	t.Helper()
	var d struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("decoding %s: %v", data, err)
	}
	parts := make([]string, len(d.Result))
	for i, r := range d.Result {
		parts[i] = string(r)
	}
	slices.Sort(parts)
	return d.ResultType + ":" + strings.Join(parts, "\n")
}

// freePort returns a loopback port nothing listens on right now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// startReadingPrometheus runs Debian's Prometheus with remote_read to the
// pusher and no scrape targets, and returns its base URL once ready.
func startReadingPrometheus(t *testing.T, pusherHTTP string) string {
	t.Helper()
	bin := requireBinary(t, "prometheus")
	dir := t.TempDir()
	config := fmt.Sprintf("remote_read:\n  - url: http://%s/api/v1/read\n    read_recent: true\n", pusherHTTP)
	configPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	var logs bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "--config.file="+configPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting prometheus: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus output:\n%s", logs.String())
		}
	})
	base := "http://" + addr
	poll.Until(t, 60*time.Second, 100*time.Millisecond, "prometheus ready", func() bool {
		resp, err := http.Get(base + "/-/ready")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return base
}

func TestPrometheusRemoteReadAnswersLikeFerry(t *testing.T) {
	t.Parallel()
	p := startQueryPusher(t, t.TempDir(), nil)
	start := recentStart()
	pushOne(t, p, defaultTenant, seriesRequest("rr_metric", 5, 120, start))
	pushOne(t, p, "other", seriesRequest("rr_metric", 2, 120, start)) // Must not leak into the default tenant.
	prom := startReadingPrometheus(t, p.HTTPAddr())
	ferry := "http://" + p.HTTPAddr()

	end := start + 119*15_000
	at := strconv.FormatFloat(float64(end+1000)/1000, 'f', 3, 64)
	for _, tc := range []struct {
		name   string
		path   string
		params url.Values
	}{
		{"an instant selector", "/api/v1/query", url.Values{"query": {"rr_metric"}, "time": {at}}},
		{"an aggregation over the whole range", "/api/v1/query", url.Values{"query": {"sum by (instance) (sum_over_time(rr_metric[1h]))"}, "time": {at}}},
		{"a range query of a rate", "/api/v1/query_range", url.Values{
			"query": {`rate(rr_metric{instance=~"i[0-2]"}[2m])`},
			"start": {strconv.FormatInt((start+300_000)/1000, 10)}, "end": {strconv.FormatInt(end/1000, 10)}, "step": {"60"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			codeF, fromFerry := getAPI(t, ferry, defaultTenant, tc.path, tc.params)
			codeP, fromProm := getAPI(t, prom, "", tc.path, tc.params)
			if codeF != http.StatusOK || codeP != http.StatusOK || len(fromProm.Warnings) > 0 {
				t.Fatalf("ferry %d %+v; prometheus %d %+v", codeF, fromFerry, codeP, fromProm)
			}
			f, pr := normalized(t, fromFerry.Data), normalized(t, fromProm.Data)
			if f != pr {
				t.Errorf("prometheus over remote read:\n%s\nferry:\n%s", pr, f)
			}
			want := `"instance":"i4"`
			if tc.name == "a range query of a rate" {
				want = `"instance":"i2"`
			}
			if !strings.Contains(f, want) || strings.Contains(f, `"instance":"i5"`) {
				t.Errorf("result lacks series %s: %s", want, f)
			}
		})
	}
}

func TestRemoteReadOfABigTenantStopsAtMaxSamples(t *testing.T) {
	t.Parallel()
	const limit = 5000
	p := startQueryPusher(t, t.TempDir(), func(c *queryapi.Config) { c.MaxSamples = limit })
	start := recentStart()
	// 200 series of 200 samples: eight times the limit.
	for batch := range 4 {
		wr := seriesRequest("big_metric", 50, 200, start)
		for i := range wr.Timeseries {
			wr.Timeseries[i].Labels = append(wr.Timeseries[i].Labels, prompb.Label{Name: "shard", Value: strconv.Itoa(batch)})
		}
		pushOne(t, p, defaultTenant, wr)
	}
	prom := startReadingPrometheus(t, p.HTTPAddr())
	at := strconv.FormatFloat(float64(start+200*15_000)/1000, 'f', 3, 64)
	code, a := getAPI(t, prom, "", "/api/v1/query", url.Values{"query": {"count(count_over_time(big_metric[2h]))"}, "time": {at}})
	// Prometheus reports a failed remote read as a warning or an error,
	// depending on whether it has local data; either way the message must
	// name the limit.
	msg := a.Error + strings.Join(a.Warnings, "; ")
	if !strings.Contains(msg, fmt.Sprintf("exceeded sample limit (%d)", limit)) {
		t.Fatalf("HTTP %d %+v: want the sample limit named", code, a)
	}
	t.Logf("prometheus answered HTTP %d: %s", code, msg)
	// The pusher serves on: a small read still works.
	code, a = getAPI(t, prom, "", "/api/v1/query", url.Values{"query": {`big_metric{instance="i0",shard="0"}`}, "time": {at}})
	if code != http.StatusOK || len(a.Warnings) > 0 || !strings.Contains(string(a.Data), `"instance":"i0"`) {
		t.Fatalf("small read after the refused one: HTTP %d %+v", code, a)
	}
}

// promtool runs promtool query with args and returns its output.
func promtool(t *testing.T, args ...string) string {
	t.Helper()
	bin := requireBinary(t, "promtool")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"query"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool query %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func TestPromtoolQueriesWhatWasStored(t *testing.T) {
	t.Parallel()
	requireBinary(t, "promtool")
	p := startQueryPusher(t, t.TempDir(), nil)
	start := recentStart()
	pushOne(t, p, defaultTenant, seriesRequest("tool_metric", 3, 20, start))
	server := "http://" + p.HTTPAddr()
	last := time.UnixMilli(start + 19*15_000).UTC()

	out := promtool(t, "instant", "--time="+last.Format(time.RFC3339), server, "tool_metric")
	for k := range 3 {
		want := fmt.Sprintf(`tool_metric{instance="i%d", job="rr"} => %d @[%d]`, k, k*1000+19, last.Unix())
		if !strings.Contains(out, want) {
			t.Errorf("instant: %q lacks %q", out, want)
		}
	}
	out = promtool(t, "range", "--start="+time.UnixMilli(start).UTC().Format(time.RFC3339), "--end="+last.Format(time.RFC3339),
		"--step=15s", server, `tool_metric{instance="i2"}`)
	for j := range 20 {
		want := fmt.Sprintf("%d @[%d]", 2000+j, time.UnixMilli(start+int64(j)*15_000).Unix())
		if !strings.Contains(out, want) {
			t.Errorf("range: %q lacks %q", out, want)
		}
	}
	out = promtool(t, "series", "--match=tool_metric", server)
	for k := range 3 {
		want := fmt.Sprintf(`{__name__="tool_metric", instance="i%d", job="rr"}`, k)
		if !strings.Contains(out, want) {
			t.Errorf("series: %q lacks %q", out, want)
		}
	}
	if out = promtool(t, "labels", server, "instance"); strings.Fields(out)[0] != "i0" || len(strings.Fields(out)) != 3 {
		t.Errorf("labels instance: %q, want i0 i1 i2", out)
	}
}

func TestExemplarsAndMetadataSurviveAPusherRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startQueryPusher(t, dir, nil)
	start := recentStart()
	wr := seriesRequest("ex_metric", 1, 4, start)
	wr.Timeseries[0].Exemplars = []prompb.Exemplar{{
		Labels: []prompb.Label{{Name: "trace_id", Value: "4bf92f3577b34da6"}}, Value: 1002, Timestamp: start + 30_000,
	}}
	wr.Metadata = []prompb.MetricMetadata{
		{MetricFamilyName: "ex_metric", Type: prompb.MetricMetadata_METRIC_TYPE_COUNTER, Help: "Requests with traces.", Unit: "requests"},
		{MetricFamilyName: "meta_only", Type: prompb.MetricMetadata_METRIC_TYPE_GAUGE, Help: "No samples yet."},
	}
	pushOne(t, p, "traced", wr)

	wantMeta := `{"ex_metric":[{"type":"counter","help":"Requests with traces.","unit":"requests"}],` +
		`"meta_only":[{"type":"gauge","help":"No samples yet.","unit":""}]}`
	wantEx := fmt.Sprintf(`[{"seriesLabels":{"__name__":"ex_metric","instance":"i0","job":"rr"},`+
		`"exemplars":[{"labels":{"trace_id":"4bf92f3577b34da6"},"value":"1002","timestamp":%d}]}]`, (start+30_000)/1000)
	check := func(when string, base string) {
		t.Helper()
		if code, a := getAPI(t, base, "traced", "/api/v1/metadata", nil); code != http.StatusOK || string(a.Data) != wantMeta {
			t.Errorf("%s: metadata HTTP %d %s, want %s", when, code, a.Data, wantMeta)
		}
		if code, a := getAPI(t, base, "traced", "/api/v1/query_exemplars", url.Values{"query": {"rate(ex_metric[5m])"}}); code != http.StatusOK || string(a.Data) != wantEx {
			t.Errorf("%s: exemplars HTTP %d %s, want %s", when, code, a.Data, wantEx)
		}
		if code, a := getAPI(t, base, defaultTenant, "/api/v1/metadata", nil); code != http.StatusOK || string(a.Data) != "{}" {
			t.Errorf("%s: another tenant's metadata HTTP %d %s", when, code, a.Data)
		}
	}
	check("before the restart", "http://"+p.HTTPAddr())
	if err := p.stop(t); err != nil {
		t.Fatal(err)
	}
	p = startQueryPusher(t, dir, nil)
	check("after the restart", "http://"+p.HTTPAddr())
}

// upstreamRead runs integration/upstreamread, Prometheus' own remote-read
// client, against the pusher and returns the series it printed, keyed by
// instance (or metric name), or its error output.
func upstreamRead(t *testing.T, bin, pusherHTTP, tenant, match string, streamed bool, start, end int64) (map[string][]float64, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-url=http://"+pusherHTTP+"/api/v1/read", "-tenant="+tenant, "-match="+match,
		"-streamed="+strconv.FormatBool(streamed), "-start="+strconv.FormatInt(start, 10), "-end="+strconv.FormatInt(end, 10))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, stderr.String())
	}
	got := map[string][]float64{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var s struct {
			Labels map[string]string `json:"labels"`
			Values []float64         `json:"values"`
		}
		if err := dec.Decode(&s); err != nil {
			t.Fatalf("decoding %q: %v", out, err)
		}
		key := s.Labels["__name__"] + "/" + s.Labels["instance"]
		got[key] = s.Values
	}
	return got, nil
}

// buildUpstreamRead builds integration/upstreamread into a temporary
// directory.
func buildUpstreamRead(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "upstreamread")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./upstreamread").CombinedOutput(); err != nil {
		t.Fatalf("building upstreamread: %v\n%s", err, out)
	}
	return bin
}

func TestUpstreamRemoteReadClientReadsBothResponseTypes(t *testing.T) {
	t.Parallel()
	bin := buildUpstreamRead(t)
	const limit = 1000
	p := startQueryPusher(t, t.TempDir(), func(c *queryapi.Config) { c.MaxSamples = limit })
	start := recentStart()
	// 200 samples a series: more than one 120-sample chunk.
	wr := seriesRequest("up_metric", 3, 200, start)
	hist := prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: "up_hist"}}}
	for j := range 10 {
		hist.Histograms = append(hist.Histograms, prompb.Histogram{
			Count: &prompb.Histogram_CountInt{CountInt: uint64(5 + j)}, Sum: 10, ZeroThreshold: 0.001,
			ZeroCount:     &prompb.Histogram_ZeroCountInt{ZeroCountInt: uint64(1 + j)},
			PositiveSpans: []prompb.BucketSpan{{Offset: 0, Length: 2}}, PositiveDeltas: []int64{2, 0},
			Timestamp: start + int64(j)*15_000,
		})
	}
	wr.Timeseries = append(wr.Timeseries, hist)
	pushOne(t, p, "up", wr)
	pushOne(t, p, "big", seriesRequest("up_metric", 6, 200, start)) // 1200 samples

	want := map[string][]float64{"up_hist/": nil}
	for k := range 3 {
		key := fmt.Sprintf("up_metric/i%d", k)
		for j := range 200 {
			want[key] = append(want[key], float64(k*1000+j))
		}
	}
	for j := range 10 {
		want["up_hist/"] = append(want["up_hist/"], float64(5+j))
	}
	end := start + 200*15_000
	for _, streamed := range []bool{true, false} {
		name := map[bool]string{true: "STREAMED_XOR_CHUNKS", false: "SAMPLES"}[streamed]
		t.Run(name+" holds every sample", func(t *testing.T) {
			got, err := upstreamRead(t, bin, p.HTTPAddr(), "up", "up_.*", streamed, start, end)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Errorf("%d series, want %d: %v", len(got), len(want), got)
			}
			for key, vals := range want {
				if !slices.Equal(got[key], vals) {
					t.Errorf("%s: %v, want %v", key, got[key], vals)
				}
			}
		})
		t.Run(name+" over -query.max-samples fails", func(t *testing.T) {
			got, err := upstreamRead(t, bin, p.HTTPAddr(), "big", "up_metric", streamed, start, end)
			if err == nil {
				t.Fatalf("a read of 1200 samples with a limit of %d succeeded: %d series", limit, len(got))
			}
			if !strings.Contains(err.Error(), "exceeded sample limit (1000)") {
				t.Errorf("error %v does not name the limit", err)
			} else {
				t.Logf("%s over the limit: %v", name, err)
			}
		})
	}
}
