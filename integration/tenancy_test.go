package integration

// The shared tenancy (-storage.tenancy=shared) promises that a tenant reads
// exactly what it would read from a TSDB of its own. This test holds it to
// that by difference: two pushers, one per tenancy, get the same writes and
// the same reads, and every answer must be the same bytes.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ferrylabs/ferry/proto/codec"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/queryapi"
	"github.com/ferrylabs/ferry/pusher/tsdbstore"
)

// sharedLabel is the label the shared tenancy stores each series' tenant
// in (tsdbstore's tenantLabel, unexported there).
const sharedLabel = "__ferry_tenant__"

// tenancyTenants write the same series names with different values; the
// last one never writes, so both pushers must also agree on nothing.
var tenancyTenants = []string{"alpha", "beta", "gamma", "nobody"}

// tenancyData is what tenant k (0, 1, 2) writes: series whose label names
// sort before sharedLabel (Region, __a) and after it, a native histogram,
// exemplars and metadata, all with values that depend on the tenant; alpha
// alone has the series only_alpha, beta alone the label name canary. One
// series comes with its labels out of order and with empty values, the
// tenant label's among them, which the store sorts and drops in either
// tenancy.
func tenancyData(k int, start int64) *prompb.WriteRequest {
	f := float64(k + 1)
	wr := &prompb.WriteRequest{}
	add := func(ls []prompb.Label, value func(j int) float64) *prompb.TimeSeries {
		ts := prompb.TimeSeries{Labels: ls}
		for j := range 20 {
			ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: start + int64(j)*15_000, Value: value(j)})
		}
		wr.Timeseries = append(wr.Timeseries, ts)
		return &wr.Timeseries[len(wr.Timeseries)-1]
	}
	for i := range 2 {
		ts := add([]prompb.Label{
			{Name: "Region", Value: "eu"}, {Name: "__a", Value: "x"}, {Name: "__name__", Value: "http_requests_total"},
			{Name: "instance", Value: "i" + strconv.Itoa(i)}, {Name: "job", Value: "api"},
		}, func(j int) float64 { return f*100 + float64(i*10+j)*f })
		ts.Exemplars = []prompb.Exemplar{{
			Labels: []prompb.Label{{Name: "trace_id", Value: fmt.Sprintf("trace-%d-%d", k, i)}},
			Value:  f*100 + 5, Timestamp: start + 5*15_000,
		}}
	}
	// Out of order, with an empty value, and with an empty tenant label:
	// {__name__="up", job="api"}, plus canary="yes" for beta.
	up := []prompb.Label{{Name: "job", Value: "api"}, {Name: "zone", Value: ""}, {Name: sharedLabel, Value: ""}, {Name: "__name__", Value: "up"}}
	if k == 1 {
		up = append(up, prompb.Label{Name: "canary", Value: "yes"})
	}
	add(up, func(j int) float64 { return float64((j + k) % 2) })
	// A series of upper-case and __ names only, beside its name.
	add([]prompb.Label{{Name: "A", Value: "1"}, {Name: "Zz", Value: strconv.Itoa(k)}, {Name: "__a", Value: "y"}, {Name: "__name__", Value: "Upper_metric"}},
		func(j int) float64 { return f * float64(j) })
	// Label names that sort right around the tenant label's.
	for i, name := range []string{"__ferry", "__ferry_tenant_", "__ferry_tenant__0", "__ferry_tenant__z", "__g", "zzz"} {
		add([]prompb.Label{{Name: name, Value: "v" + strconv.Itoa(i)}, {Name: "__name__", Value: "near_metric"}},
			func(j int) float64 { return f + float64(i) })
	}
	if k == 0 {
		add([]prompb.Label{{Name: "__name__", Value: "only_alpha"}, {Name: "job", Value: "solo"}}, func(j int) float64 { return float64(j) })
	}
	hist := prompb.TimeSeries{Labels: []prompb.Label{{Name: "Region", Value: "eu"}, {Name: "__name__", Value: "req_duration_seconds"}, {Name: "job", Value: "api"}}}
	for j := range 20 {
		n := uint64(k+1) * uint64(j+1)
		hist.Histograms = append(hist.Histograms, prompb.Histogram{
			Count: &prompb.Histogram_CountInt{CountInt: 3 * n}, Sum: f * float64(j), Schema: 1, ZeroThreshold: 0.001,
			ZeroCount:     &prompb.Histogram_ZeroCountInt{ZeroCountInt: n},
			PositiveSpans: []prompb.BucketSpan{{Offset: 0, Length: 2}}, PositiveDeltas: []int64{int64(n), 0},
			Timestamp: start + int64(j)*15_000,
		})
	}
	hist.Exemplars = []prompb.Exemplar{{Labels: []prompb.Label{{Name: "trace_id", Value: fmt.Sprintf("hist-%d", k)}}, Value: 0.5 * f, Timestamp: start + 30_000}}
	wr.Timeseries = append(wr.Timeseries, hist)
	wr.Metadata = []prompb.MetricMetadata{
		{MetricFamilyName: "http_requests_total", Type: prompb.MetricMetadata_METRIC_TYPE_COUNTER, Help: "Requests of tenant " + strconv.Itoa(k) + ".", Unit: "requests"},
		{MetricFamilyName: "req_duration_seconds", Type: prompb.MetricMetadata_METRIC_TYPE_HISTOGRAM, Help: "Latency.", Unit: "seconds"},
	}
	if k == 2 {
		wr.Metadata = append(wr.Metadata, prompb.MetricMetadata{MetricFamilyName: "gamma_meta", Type: prompb.MetricMetadata_METRIC_TYPE_GAUGE, Help: "Only gamma."})
	}
	return wr
}

// apiCall is one request of the comparison, asked as every tenant.
type apiCall struct {
	name   string
	path   string
	params url.Values
	// distinct: alpha's answer must differ from beta's and from the one of
	// the tenant that never wrote, so that one tenant's data showing in
	// another's answer would be seen. A call that is not distinct must
	// find nothing of alpha's: its answer is the never-writing tenant's.
	// nonEmpty lifts the comparison with the never-writing tenant, for
	// calls that find the same non-empty answer for every tenant that wrote.
	distinct, nonEmpty bool
	// echoes: the answer names the tenant label because the request does
	// (absent() copies the selector's labels), in both tenancies.
	echoes bool
	// status is the HTTP status both pushers must answer.
	status int
}

// rawAnswer is an HTTP answer as compared: status, content type, body.
type rawAnswer struct {
	status      int
	contentType string
	body        []byte
}

func (a rawAnswer) String() string {
	return fmt.Sprintf("HTTP %d %s %s", a.status, a.contentType, a.body)
}

// ask sends GET http://httpAddr+path?params as tenant.
func ask(t *testing.T, httpAddr, tenant, path string, params url.Values) rawAnswer {
	t.Helper()
	return getRaw(t, "http://"+httpAddr, tenant, path, params)
}

func TestTheTenanciesAnswerAlike(t *testing.T) {
	t.Parallel()
	pushers := map[string]*pusherProc{}
	for _, tenancy := range []string{tsdbstore.TenancySeparate, tsdbstore.TenancyShared} {
		cfg := pusherConfig(t, t.TempDir())
		cfg.TSDB.Tenancy = tenancy
		cfg.TSDB.MaxExemplars = 1000
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		pushers[tenancy] = startPusher(t, cfg)
	}
	sep, shared := pushers[tsdbstore.TenancySeparate], pushers[tsdbstore.TenancyShared]
	start := recentStart()
	for k, tenant := range tenancyTenants[:3] {
		for _, p := range []*pusherProc{sep, shared} {
			pushOne(t, p, tenant, tenancyData(k, start))
		}
	}

	last := start + 19*15_000
	at := strconv.FormatFloat(float64(last+1000)/1000, 'f', 3, 64)
	rangeParams := func(q string) url.Values {
		return url.Values{"query": {q}, "start": {strconv.FormatInt(start/1000, 10)}, "end": {strconv.FormatInt(last/1000+1, 10)}, "step": {"30"}}
	}
	instant := func(name, q string, distinct bool) apiCall {
		return apiCall{name: name, path: "/api/v1/query", params: url.Values{"query": {q}, "time": {at}}, distinct: distinct, status: http.StatusOK}
	}
	match := func(path string, distinct bool, extra url.Values, ms ...string) apiCall {
		p := url.Values{"match[]": ms}
		for k, v := range extra {
			p[k] = v
		}
		return apiCall{name: path + " " + strings.Join(ms, " ") + " " + extra.Encode(), path: path, params: p, distinct: distinct, status: http.StatusOK}
	}
	values := func(name string, distinct bool, ms ...string) apiCall {
		return match("/api/v1/label/"+name+"/values", distinct, nil, ms...)
	}
	// some marks a call whose answer is not empty for every tenant that
	// wrote (alpha's may be beta's: same labels, other values); echo one whose answer names the tenant label
	// because the request does.
	some := func(c apiCall) apiCall { c.nonEmpty = true; return c }
	echo := func(c apiCall) apiCall { c.echoes = true; return c }
	exemplarWindow := url.Values{"start": {strconv.FormatInt(start/1000, 10)}, "end": {strconv.FormatInt(last/1000+1, 10)}}
	exemplars := func(q string, distinct bool) apiCall {
		p := url.Values{"query": {q}}
		for k, v := range exemplarWindow {
			p[k] = v
		}
		return apiCall{name: "exemplars " + q, path: "/api/v1/query_exemplars", params: p, distinct: distinct, status: http.StatusOK}
	}
	calls := []apiCall{
		instant("instant vector", "http_requests_total", true),
		instant("every series", `{__name__=~".+"}`, true),
		instant("sum by", "sum by (Region, __a, job) (http_requests_total)", true),
		instant("count by the tenant label", "count by ("+sharedLabel+") ({__name__=~\".+\"})", true),
		instant("sum by the tenant label", "sum by ("+sharedLabel+", job) (rate(http_requests_total[5m]))", true),
		instant("the tenant label equal to alpha", `http_requests_total{`+sharedLabel+`="alpha"}`, false),
		instant("the tenant label equal to beta", `http_requests_total{`+sharedLabel+`="beta"}`, false),
		instant("the tenant label empty", `http_requests_total{`+sharedLabel+`=""}`, true),
		instant("the tenant label not x", `{`+sharedLabel+`!="x", job="api"}`, true),
		instant("the tenant label matching anything", `{`+sharedLabel+`=~".*", __name__=~"up|only_alpha"}`, true),
		instant("the tenant label matching something", `{`+sharedLabel+`=~".+", __name__=~".+"}`, false),
		instant("the tenant label matching alpha or nothing", `{`+sharedLabel+`=~"alpha|", job="api"}`, true),
		instant("the tenant label not matching alpha", `{`+sharedLabel+`!~"alpha", job="api"}`, true),
		instant("the tenant label not empty", `{`+sharedLabel+`!="", job="api"}`, false),
		instant("the tenant label not matching nothing", `{`+sharedLabel+`!~"", job="api"}`, false),
		instant("names next to the tenant label", `near_metric`, true),
		instant("names next to the tenant label, selected", `{__ferry_tenant_="v1"} or {__ferry_tenant__0="v2"} or {__ferry_tenant__z=~"v.*"}`, true),
		instant("sum without", `sum without (instance) ({__name__=~"http_requests_total|near_metric"})`, true),
		instant("label_replace from the tenant label", `label_replace(up, "x", "$1", "`+sharedLabel+`", "(.*)")`, true),
		echo(instant("label_replace into the tenant label", `label_replace(up, "`+sharedLabel+`", "evil", "", "")`, true)),
		instant("the tenant label alone, alpha", `{`+sharedLabel+`="alpha"}`, false),
		{name: "the tenant label alone, empty", path: "/api/v1/query", params: url.Values{"query": {`{` + sharedLabel + `=""}`}, "time": {at}}, status: http.StatusBadRequest},
		echo(instant("absent of the tenant label", `absent(up{`+sharedLabel+`="alpha"})`, false)),
		instant("upper-case labels", `Upper_metric`, true),
		instant("group by upper-case labels", `group by (A, Zz, __a) ({__a=~"x|y"})`, true),
		instant("the series only alpha has", "only_alpha", true),
		some(instant("the label only beta uses", `up{canary="yes"}`, true)),
		instant("a native histogram", "req_duration_seconds", true),
		instant("a histogram function", "histogram_count(rate(req_duration_seconds[5m]))", true),
		instant("label_join over the labels", `label_join(up, "all", ",", "__name__", "job", "canary")`, true),
		{name: "range of a rate", path: "/api/v1/query_range", params: rangeParams("rate(http_requests_total[1m])"), distinct: true, status: http.StatusOK},
		{name: "range of every series", path: "/api/v1/query_range", params: rangeParams(`{__name__=~".+"}`), distinct: true, status: http.StatusOK},
		{name: "range by the tenant label", path: "/api/v1/query_range", params: rangeParams("count by (" + sharedLabel + ", Region) ({__name__=~\".+\"})"), distinct: true, status: http.StatusOK},
		{name: "range of the tenant's own label", path: "/api/v1/query_range", params: rangeParams(`{__name__=~".+", ` + sharedLabel + `="gamma"}`), status: http.StatusOK},
		match("/api/v1/series", true, nil, `{__name__=~".+"}`),
		match("/api/v1/series", true, nil, "http_requests_total", "up"),
		match("/api/v1/series", true, nil, `{job="api", `+sharedLabel+`=""}`),
		match("/api/v1/series", true, nil, `{job="api", `+sharedLabel+`=~".*"}`),
		match("/api/v1/series", false, nil, `{job="api", `+sharedLabel+`="alpha"}`),
		match("/api/v1/series", false, nil, `{job="api", `+sharedLabel+`=~".+"}`),
		match("/api/v1/series", true, nil, `http_requests_total{`+sharedLabel+`="alpha"}`, "up", "near_metric"),
		match("/api/v1/series", false, url.Values{"start": {"0"}, "end": {"1"}}, `{__name__=~".+"}`),
		some(match("/api/v1/series", false, url.Values{"limit": {"2"}}, `{__name__=~".+"}`)),
		match("/api/v1/labels", true, nil),
		match("/api/v1/labels", true, nil, "up"),
		match("/api/v1/labels", true, nil, "up", "near_metric", `only_alpha{`+sharedLabel+`!=""}`),
		match("/api/v1/label/job/values", true, nil, "up", `{`+sharedLabel+`="", __name__=~"only_alpha|Upper_metric"}`),
		match("/api/v1/labels", false, nil, `{`+sharedLabel+`="alpha", job="api"}`),
		match("/api/v1/labels", true, nil, `{`+sharedLabel+`="", job="api"}`),
		some(match("/api/v1/labels", false, url.Values{"limit": {"1"}})),
		some(match("/api/v1/labels", false, url.Values{"limit": {"3"}})),
		some(match("/api/v1/labels", false, url.Values{"limit": {"4"}}, "near_metric")),
		some(match("/api/v1/labels", false, url.Values{"limit": {"1"}}, "up")),
		match("/api/v1/labels", false, nil, `{`+sharedLabel+`=~".+"}`),
		match("/api/v1/labels", false, url.Values{"start": {"0"}, "end": {"1"}}),
		// The limits end just before and just after where the tenant label
		// sorts in the shared TSDB (after __ferry_tenant_).
		some(match("/api/v1/labels", false, url.Values{"limit": {"6"}})),
		some(match("/api/v1/labels", false, url.Values{"limit": {"7"}})),
		values(sharedLabel, false),
		values(sharedLabel, false, `{__name__=~".+"}`),
		values("__name__", true),
		values("__name__", false, `{`+sharedLabel+`="alpha"}`),
		some(values("__name__", false, `{`+sharedLabel+`="", job="api"}`)),
		some(values("Region", false)),
		some(match("/api/v1/label/__name__/values", false, url.Values{"limit": {"2"}})),
		values("Zz", true),
		some(values("__a", false)),
		some(values("canary", true)),
		some(values("instance", false, "http_requests_total")),
		exemplars("http_requests_total", true),
		exemplars(`{__name__=~".+"}`, true),
		exemplars(`http_requests_total{`+sharedLabel+`=""}`, true),
		exemplars(`http_requests_total{`+sharedLabel+`="alpha"}`, false),
		exemplars(`rate(req_duration_seconds[5m]) + on() group_left sum(http_requests_total{`+sharedLabel+`=~".+"})`, true),
		{name: "metadata", path: "/api/v1/metadata", distinct: true, status: http.StatusOK},
		{name: "metadata of a metric", path: "/api/v1/metadata", params: url.Values{"metric": {"http_requests_total"}}, distinct: true, status: http.StatusOK},
		{name: "metadata, limit 1", path: "/api/v1/metadata", params: url.Values{"limit": {"1"}}, nonEmpty: true, status: http.StatusOK},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			byTenant := map[string]rawAnswer{}
			for _, tenant := range tenancyTenants {
				a := ask(t, sep.HTTPAddr(), tenant, c.path, c.params)
				b := ask(t, shared.HTTPAddr(), tenant, c.path, c.params)
				if a.status != c.status {
					t.Errorf("%s: separate answered %v, want HTTP %d", tenant, a, c.status)
				}
				if !bytes.Equal(a.body, b.body) || a.status != b.status || a.contentType != b.contentType {
					t.Errorf("%s: the tenancies differ\nseparate: %v\nshared:   %v", tenant, a, b)
				}
				if bytes.Contains(b.body, []byte(`"`+sharedLabel+`"`)) && !c.echoes {
					t.Errorf("%s: the shared pusher's answer names %s: %v", tenant, sharedLabel, b)
				}
				byTenant[tenant] = a
			}
			if c.distinct && bytes.Equal(byTenant["alpha"].body, byTenant["beta"].body) {
				t.Errorf("alpha and beta got the same answer, which shows nothing: %v", byTenant["alpha"])
			}
			if !c.nonEmpty && bytes.Equal(byTenant["alpha"].body, byTenant["nobody"].body) == c.distinct {
				t.Errorf("alpha %v, a tenant that never wrote %v", byTenant["alpha"], byTenant["nobody"])
			}
		})
	}

	t.Run("remote read", func(t *testing.T) {
		all := readQuery{start: start, end: last + 1, matchers: []readMatcher{{typ: 2, name: "__name__", value: ".+"}}}
		queries := []struct {
			name     string
			queries  []readQuery
			distinct bool
		}{
			{"every series", []readQuery{all}, true},
			{"by job, and the tenant label empty", []readQuery{{start: start, end: last + 1, matchers: []readMatcher{
				{typ: 0, name: "job", value: "api"}, {typ: 0, name: sharedLabel, value: ""}}}}, true},
			{"the tenant label alpha", []readQuery{{start: start, end: last + 1, matchers: []readMatcher{
				{typ: 2, name: "__name__", value: ".+"}, {typ: 0, name: sharedLabel, value: "alpha"}}}}, false},
			{"the tenant label not empty, then every series", []readQuery{{start: start, end: last + 1, matchers: []readMatcher{
				{typ: 0, name: "job", value: "api"}, {typ: 2, name: sharedLabel, value: ".+"}}}, all}, true},
		}
		for _, q := range queries {
			for _, streamed := range []bool{false, true} {
				name := q.name + map[bool]string{false: ", SAMPLES", true: ", STREAMED_XOR_CHUNKS"}[streamed]
				t.Run(name, func(t *testing.T) {
					byTenant := map[string]string{}
					for _, tenant := range tenancyTenants {
						rawA, a := remoteReadDecoded(t, sep.HTTPAddr(), tenant, q.queries, streamed)
						rawB, b := remoteReadDecoded(t, shared.HTTPAddr(), tenant, q.queries, streamed)
						if a != b {
							t.Errorf("%s: the tenancies differ\nseparate:\n%s\nshared:\n%s", tenant, a, b)
						} else if !bytes.Equal(rawA, rawB) {
							t.Errorf("%s: the same series, but the encoded answers differ:\nseparate %x\nshared   %x", tenant, rawA, rawB)
						}
						// The label's name as a protobuf string: its length, 16, then
						// the name (not __ferry_tenant__0 and the like).
						if bytes.Contains(rawB, append([]byte{byte(len(sharedLabel))}, sharedLabel...)) {
							t.Errorf("%s: the shared pusher's answer names %s:\n%s", tenant, sharedLabel, b)
						}
						byTenant[tenant] = a
					}
					if q.distinct && byTenant["alpha"] == byTenant["beta"] {
						t.Errorf("alpha and beta read the same, which shows nothing:\n%s", byTenant["alpha"])
					}
					if (byTenant["alpha"] == byTenant["nobody"]) == q.distinct {
						t.Errorf("alpha read:\n%s\na tenant that never wrote read:\n%s", byTenant["alpha"], byTenant["nobody"])
					}
				})
			}
		}
	})

	// The tenant label in a write: refused by the shared pusher, where it
	// would claim another tenant's name; an ordinary label to the separate
	// one, which stores and answers it as sent.
	t.Run("a write that sets the tenant label", func(t *testing.T) {
		wr := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
			{
				Labels:  []prompb.Label{{Name: sharedLabel, Value: "alpha"}, {Name: "__name__", Value: "intruder"}},
				Samples: []prompb.Sample{{Timestamp: start, Value: 1}},
			},
			{
				Labels:  []prompb.Label{{Name: "__name__", Value: "bystander"}},
				Samples: []prompb.Sample{{Timestamp: start, Value: 2}},
			},
		}}
		const tenant = "intruding"
		resp := pushOneAnswer(t, shared, tenant, wr)
		if resp.Status != ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR || !strings.Contains(resp.Reason, sharedLabel) ||
			resp.AcceptedSamples != 1 || resp.RejectedSamples != 1 {
			t.Errorf("shared pusher: %v, accepted %d, rejected %d (%s); want CLIENT_ERROR, 1, 1, naming %s",
				resp.Status, resp.AcceptedSamples, resp.RejectedSamples, resp.Reason, sharedLabel)
		}
		t.Logf("shared pusher: %v: %s", resp.Status, resp.Reason)
		resp = pushOneAnswer(t, sep, tenant, wr)
		if resp.Status != ferryv1.AckStatus_ACK_STATUS_OK || resp.AcceptedSamples != 2 {
			t.Errorf("separate pusher: %v, accepted %d (%s); want OK, 2", resp.Status, resp.AcceptedSamples, resp.Reason)
		}
		series := url.Values{"match[]": {`{__name__=~".+"}`}}
		want := `[{"__ferry_tenant__":"alpha","__name__":"intruder"},{"__name__":"bystander"}]`
		if _, a := getAPI(t, "http://"+sep.HTTPAddr(), tenant, "/api/v1/series", series); string(a.Data) != want {
			t.Errorf("separate pusher's series: %s, want %s", a.Data, want)
		}
		want = `[{"__name__":"bystander"}]`
		if _, a := getAPI(t, "http://"+shared.HTTPAddr(), tenant, "/api/v1/series", series); string(a.Data) != want {
			t.Errorf("shared pusher's series: %s, want %s", a.Data, want)
		}
		// Nothing reached alpha in either.
		for _, p := range []*pusherProc{sep, shared} {
			if _, a := getAPI(t, "http://"+p.HTTPAddr(), "alpha", "/api/v1/series", url.Values{"match[]": {"intruder"}}); string(a.Data) != "[]" {
				t.Errorf("alpha's series named intruder: %s", a.Data)
			}
		}
	})
}

// pushOneAnswer sends wr as tenant with PushOne and returns the answer,
// whatever its status.
func pushOneAnswer(t *testing.T, p *pusherProc, tenant string, wr *prompb.WriteRequest) *ferryv1.PushResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()), codec.DialOption())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	resp, err := ferryv1.NewPusherServiceClient(conn).PushOne(ctx, &ferryv1.PushRequest{RequestId: 1, Tenant: tenant, WriteRequest: *wr})
	if err != nil {
		t.Fatalf("PushOne: %v", err)
	}
	return resp
}

// readQuery and readMatcher are a remote-read query, encoded by the field
// numbers of Prometheus' remote.proto (Ferry's prompb has no read
// messages, and Prometheus' cannot be linked beside it).
type readQuery struct {
	start, end int64
	matchers   []readMatcher
}

type readMatcher struct {
	typ         uint64 // 0 EQ, 1 NEQ, 2 RE, 3 NRE
	name, value string
}

func encodeRead(queries []readQuery, streamed bool) []byte {
	var b []byte
	for _, q := range queries {
		var qb []byte
		qb = protowire.AppendTag(qb, 1, protowire.VarintType)
		qb = protowire.AppendVarint(qb, uint64(q.start))
		qb = protowire.AppendTag(qb, 2, protowire.VarintType)
		qb = protowire.AppendVarint(qb, uint64(q.end))
		for _, m := range q.matchers {
			var mb []byte
			mb = protowire.AppendTag(mb, 1, protowire.VarintType)
			mb = protowire.AppendVarint(mb, m.typ)
			mb = protowire.AppendTag(mb, 2, protowire.BytesType)
			mb = protowire.AppendString(mb, m.name)
			mb = protowire.AppendTag(mb, 3, protowire.BytesType)
			mb = protowire.AppendString(mb, m.value)
			qb = protowire.AppendTag(qb, 3, protowire.BytesType)
			qb = protowire.AppendBytes(qb, mb)
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, qb)
	}
	// accepted_response_types: 0 SAMPLES, 1 STREAMED_XOR_CHUNKS.
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	if streamed {
		b = protowire.AppendVarint(b, 1)
	} else {
		b = protowire.AppendVarint(b, 0)
	}
	return b
}

// remoteReadDecoded posts a read as tenant and returns the answer's
// protobuf (snappy removed; for a streamed answer, the frames' messages
// one after the other) and the series it holds as text, one per line: the
// query's index, the labels in their order on the wire, and every sample
// or histogram (a streamed answer's per chunk, with the chunk's bounds).
func remoteReadDecoded(t *testing.T, httpAddr, tenant string, queries []readQuery, streamed bool) ([]byte, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+httpAddr+"/api/v1/read", bytes.NewReader(snappy.Encode(nil, encodeRead(queries, streamed))))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(queryapi.TenantHeader, tenant)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("remote read as %s: HTTP %d %s", tenant, resp.StatusCode, body)
	}
	var out strings.Builder
	if !streamed {
		raw, err := snappy.Decode(nil, body)
		if err != nil {
			t.Fatal(err)
		}
		index := 0
		err = protoFields(raw, func(num protowire.Number, v []byte) error {
			defer func() { index++ }()
			return protoFields(v, func(_ protowire.Number, v []byte) error {
				var ts prompb.TimeSeries
				if err := ts.Unmarshal(v); err != nil {
					return err
				}
				hs, err := json.Marshal(ts.Histograms)
				if err != nil {
					return err
				}
				fmt.Fprintf(&out, "%d ", index)
				for _, l := range ts.Labels {
					fmt.Fprintf(&out, "%s=%q ", l.Name, l.Value)
				}
				fmt.Fprintf(&out, "| samples %v histograms %s exemplars %v\n", ts.Samples, hs, ts.Exemplars)
				return nil
			})
		})
		if err != nil {
			t.Fatalf("decoding a SAMPLES answer: %v", err)
		}
		return raw, out.String()
	}
	var raw []byte
	r := bufio.NewReader(bytes.NewReader(body))
	for {
		n, err := binary.ReadUvarint(r)
		if errors.Is(err, io.EOF) {
			return raw, out.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		var crc [4]byte
		if _, err := io.ReadFull(r, crc[:]); err != nil {
			t.Fatal(err)
		}
		frame := make([]byte, n)
		if _, err := io.ReadFull(r, frame); err != nil {
			t.Fatal(err)
		}
		if crc32.Checksum(frame, crc32.MakeTable(crc32.Castagnoli)) != binary.BigEndian.Uint32(crc[:]) {
			t.Fatal("a frame's CRC does not match")
		}
		raw = append(raw, frame...)
		if err := decodeChunkedFrame(frame, &out); err != nil {
			t.Fatalf("decoding a STREAMED_XOR_CHUNKS frame: %v", err)
		}
	}
}

// decodeChunkedFrame writes the series of a ChunkedReadResponse to out.
func decodeChunkedFrame(frame []byte, out *strings.Builder) error {
	var series []string
	var index uint64
	err := protoFields(frame, func(num protowire.Number, v []byte) error {
		if num == 2 { // query_index, a varint
			index, _ = protowire.ConsumeVarint(v)
			return nil
		}
		var s strings.Builder
		err := protoFields(v, func(num protowire.Number, v []byte) error {
			if num == 1 {
				var l prompb.Label
				if err := l.Unmarshal(v); err != nil {
					return err
				}
				fmt.Fprintf(&s, "%s=%q ", l.Name, l.Value)
				return nil
			}
			var minT, maxT, enc uint64
			var data []byte
			if err := protoFields(v, func(num protowire.Number, v []byte) error {
				switch num {
				case 1:
					minT, _ = protowire.ConsumeVarint(v)
				case 2:
					maxT, _ = protowire.ConsumeVarint(v)
				case 3:
					enc, _ = protowire.ConsumeVarint(v)
				case 4:
					data = v
				}
				return nil
			}); err != nil {
				return err
			}
			c, err := chunkenc.FromData(chunkenc.Encoding(enc), data)
			if err != nil {
				return err
			}
			fmt.Fprintf(&s, "| chunk %d..%d %v:", int64(minT), int64(maxT), chunkenc.Encoding(enc))
			it := c.Iterator(nil)
			for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
				switch vt {
				case chunkenc.ValFloat:
					ts, v := it.At()
					fmt.Fprintf(&s, " %d:%v", ts, v)
				case chunkenc.ValHistogram:
					ts, h := it.AtHistogram(nil)
					fmt.Fprintf(&s, " %d:%s", ts, h)
				case chunkenc.ValFloatHistogram:
					ts, h := it.AtFloatHistogram(nil)
					fmt.Fprintf(&s, " %d:%s", ts, h)
				}
			}
			return it.Err()
		})
		series = append(series, s.String())
		return err
	})
	for _, s := range series {
		fmt.Fprintf(out, "%d %s\n", index, s)
	}
	return err
}

// protoFields calls fn with every field of the message b: its number and,
// for a length-delimited field, its bytes; for a varint, the varint's
// encoding.
func protoFields(b []byte, fn func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			_, n = protowire.ConsumeVarint(b)
			if n >= 0 {
				v = b[:n]
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := fn(num, v); err != nil {
			return err
		}
	}
	return nil
}
