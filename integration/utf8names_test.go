package integration

// UTF-8 metric and label names (issue 32), as Prometheus 3 takes them by
// default and OpenTelemetry sends them: through the gateway in remote
// write 1.0 and 2.0, over the real broker, into the pusher's TSDB, and
// back through PromQL's quoted selectors, the label endpoints (with the
// U__ escaping of a name in a URL path), series, metadata and remote read.
// Under -limits.name-validation-scheme=legacy the gateway answers them 400
// and the pusher CLIENT_ERROR, naming the rule.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/common/model"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	gatewayapp "github.com/ferrylabs/ferry/gateway/app"
	"github.com/ferrylabs/ferry/internal/kafkatest"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// startNamesGateway starts a gateway with cfg and returns its HTTP address.
func startNamesGateway(t *testing.T, cfg gatewayapp.Config) string {
	t.Helper()
	g := startGateway(t, cfg)
	return g.HTTPAddr()
}

// writeAnswer is the gateway's answer to a remote write.
type writeAnswer struct {
	status  int
	body    string
	written string // X-Prometheus-Remote-Write-Samples-Written
}

// remoteWrite posts the snappy-compressed protobuf raw to the gateway at
// addr as remote write 2.0 when v2, else 1.0.
func remoteWrite(t *testing.T, addr string, raw []byte, v2 bool) writeAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/api/v1/write", bytes.NewReader(snappy.Encode(nil, raw)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Encoding", "snappy")
	if v2 {
		req.Header.Set("Content-Type", "application/x-protobuf;proto=io.prometheus.write.v2.Request")
		req.Header.Set("X-Prometheus-Remote-Write-Version", "2.0.0")
	} else {
		req.Header.Set("Content-Type", "application/x-protobuf")
		req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return writeAnswer{status: resp.StatusCode, body: string(body), written: resp.Header.Get("X-Prometheus-Remote-Write-Samples-Written")}
}

// utf8Series are the series of the tests' remote write 1.0 request, at ts:
// an OpenTelemetry histogram's name with dotted and spaced label names, a
// metric name with a space, and a classic series beside them.
func utf8Request(ts int64) *prompb.WriteRequest {
	sample := func(v float64) []prompb.Sample { return []prompb.Sample{{Value: v, Timestamp: ts}} }
	return &prompb.WriteRequest{
		Timeseries: []prompb.TimeSeries{
			{Labels: []prompb.Label{{Name: "__name__", Value: "http.server.request.duration"}, {Name: "deployment env", Value: "prod"}, {Name: "service.name", Value: "api"}}, Samples: sample(1.5)},
			{Labels: []prompb.Label{{Name: "__name__", Value: "request count"}, {Name: "zone name", Value: "eu west"}}, Samples: sample(7)},
			{Labels: []prompb.Label{{Name: "__name__", Value: "classic_total"}, {Name: "job", Value: "api"}}, Samples: sample(3)},
		},
		Metadata: []prompb.MetricMetadata{{Type: prompb.MetricMetadata_METRIC_TYPE_GAUGE, MetricFamilyName: "http.server.request.duration", Help: "Duration of HTTP server requests.", Unit: "s"}},
	}
}

// utf8RequestV2 is a remote write 2.0 request of one series with a dotted
// metric name and a dotted label name whose value has a space, at ts.
func utf8RequestV2(ts int64) *writev2.Request {
	return &writev2.Request{
		Symbols: []string{"", "__name__", "rw2.queue.size", "service.name", "api v2", "Items waiting in the queue.", "{item}"},
		Timeseries: []writev2.TimeSeries{{
			LabelsRefs: []uint32{1, 2, 3, 4},
			Samples:    []writev2.Sample{{Value: 11, Timestamp: ts}},
			Metadata:   writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_GAUGE, HelpRef: 5, UnitRef: 6},
		}},
	}
}

func marshal(t *testing.T, m interface{ Marshal() ([]byte, error) }) []byte {
	t.Helper()
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestUTF8NamesThroughTheGatewayAreStoredAndQueryableWithQuotedSelectors(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	gw := startNamesGateway(t, gatewayConfig(t, p, "127.0.0.1:0"))
	ts := time.Now().Add(-time.Minute).UnixMilli()

	if a := remoteWrite(t, gw, marshal(t, utf8Request(ts)), false); a.status != http.StatusNoContent {
		t.Fatalf("remote write 1.0: HTTP %d %q, want 204", a.status, a.body)
	}
	if a := remoteWrite(t, gw, marshal(t, utf8RequestV2(ts)), true); a.status != http.StatusNoContent || a.written != "1" {
		t.Fatalf("remote write 2.0: HTTP %d %q, %s samples written; want 204 and 1", a.status, a.body, a.written)
	}

	addr := p.pusher.HTTPAddr()
	for q, want := range map[string]float64{
		`{"http.server.request.duration", "service.name"="api"}`:            1.5,
		`{"http.server.request.duration", "deployment env"="prod"}`:         1.5,
		`{__name__="http.server.request.duration"}`:                         1.5,
		`sum by ("service.name") ({"http.server.request.duration"})`:        1.5,
		`{"request count", "zone name"="eu west"}`:                          7,
		`{"rw2.queue.size", "service.name"="api v2"}`:                       11,
		`classic_total{job="api"}`:                                          3,
		`{"http.server.request.duration"} + on() {"request count"} * 0 + 1`: 2.5,
	} {
		waitFor(t, 30*time.Second, "query "+q, func() bool {
			code, r := query(t, addr, gatewayTenant, q, ts)
			v, err := scalarOf(r)
			return code == http.StatusOK && err == nil && v == want
		})
	}
	_, r := query(t, addr, gatewayTenant, `{"http.server.request.duration"}`, ts)
	if got, want := r.Data.Result[0].Metric, map[string]string{"__name__": "http.server.request.duration", "deployment env": "prod", "service.name": "api"}; !mapsEqual(got, want) {
		t.Errorf("the series' labels: %v, want %v", got, want)
	}

	base := "http://" + addr
	checkData := func(path string, params url.Values, want string) {
		t.Helper()
		code, a := getAPI(t, base, gatewayTenant, path, params)
		if code != http.StatusOK || compactJSON(t, a.Data) != want {
			t.Errorf("GET %s?%s: HTTP %d %s, want %s", path, params.Encode(), code, a.Data, want)
		}
	}
	checkData("/api/v1/labels", nil, `["__name__","deployment env","job","service.name","zone name"]`)
	checkData("/api/v1/label/__name__/values", nil, `["classic_total","http.server.request.duration","request count","rw2.queue.size"]`)
	// Prometheus 3's escaping of a name that is not a classic one in the
	// path (model.ValueEncodingEscaping), and the name as it is.
	checkData("/api/v1/label/U__service_2e_name/values", nil, `["api","api v2"]`)
	checkData("/api/v1/label/U__deployment_20_env/values", nil, `["prod"]`)
	checkData("/api/v1/label/service.name/values", nil, `["api","api v2"]`)
	checkData("/api/v1/series", url.Values{"match[]": {`{"request count"}`}}, `[{"__name__":"request count","zone name":"eu west"}]`)
	checkData("/api/v1/metadata", url.Values{"metric": {"http.server.request.duration"}},
		`{"http.server.request.duration":[{"type":"gauge","help":"Duration of HTTP server requests.","unit":"s"}]}`)
	checkData("/api/v1/metadata", url.Values{"metric": {"rw2.queue.size"}},
		`{"rw2.queue.size":[{"type":"gauge","help":"Items waiting in the queue.","unit":"{item}"}]}`)
	if escaped := model.EscapeName("service.name", model.ValueEncodingEscaping); escaped != "U__service_2e_name" {
		t.Errorf("Prometheus escapes service.name as %s, not as this test does", escaped)
	}

	read := []readQuery{{start: ts - 60_000, end: ts + 60_000, matchers: []readMatcher{
		{typ: 0, name: "__name__", value: "http.server.request.duration"}, {typ: 0, name: "service.name", value: "api"},
	}}}
	for _, streamed := range []bool{false, true} {
		_, out := remoteReadDecoded(t, addr, gatewayTenant, read, streamed)
		for _, want := range []string{`__name__="http.server.request.duration" deployment env="prod" service.name="api"`, "1.5"} {
			if !strings.Contains(out, want) || strings.Count(out, "\n") != 1 {
				t.Errorf("remote read (streamed %v): %q, want one series with %q", streamed, out, want)
			}
		}
	}

	page := getRaw(t, base, "", "/", nil)
	if !strings.Contains(string(page.body), "<td>"+gatewayTenant+"</td><td>open</td><td>4</td>") || !strings.Contains(string(page.body), "utf8") {
		t.Errorf("status page: HTTP %d, want the tenant's 4 series and the scheme:\n%s", page.status, page.body)
	}
}

func TestUTF8NamesAreRefusedUnderLegacyNamingTheRuleAtTheGatewayAndThePusher(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	group := topic + "-group"
	pcfg := pusherConfig(t, t.TempDir())
	pcfg.Pusher.Limits.NameValidation = model.LegacyValidation
	pp := startPusher(t, pcfg)
	var log syncBuffer
	c := startConsumer(t, consumerConfig(t, b, topic, group, "consumer-0", pp.GRPCAddr()),
		slog.New(slog.NewJSONHandler(io.MultiWriter(&log, logSink()), &slog.HandlerOptions{Level: slog.LevelInfo})))
	gcfg := gatewayConfig(t, pipeline{broker: b, topic: topic, pusher: pp}, "127.0.0.1:0")
	gcfg.Gateway.Limits.NameValidation = model.LegacyValidation
	gw := startNamesGateway(t, gcfg)
	ts := time.Now().Add(-time.Minute).UnixMilli()

	const metricRule = `invalid metric name "http.server.request.duration" (-limits.name-validation-scheme=legacy: [a-zA-Z_:][a-zA-Z0-9_:]*)`
	onlyLabel := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
		Labels:  []prompb.Label{{Name: "__name__", Value: "up"}, {Name: "service.name", Value: "api"}},
		Samples: []prompb.Sample{{Value: 1, Timestamp: ts}},
	}}}
	for _, tc := range []struct {
		name string
		raw  []byte
		v2   bool
		says string
	}{
		{"remote write 1.0", marshal(t, utf8Request(ts)), false, metricRule},
		{"remote write 2.0", marshal(t, utf8RequestV2(ts)), true, `invalid metric name "rw2.queue.size" (-limits.name-validation-scheme=legacy`},
		{"a dotted label name", marshal(t, onlyLabel), false, `invalid label name "service.name" (-limits.name-validation-scheme=legacy: [a-zA-Z_][a-zA-Z0-9_]*)`},
	} {
		if a := remoteWrite(t, gw, tc.raw, tc.v2); a.status != http.StatusBadRequest || !strings.Contains(a.body, tc.says) {
			t.Errorf("%s: HTTP %d %q, want 400 saying %q", tc.name, a.status, a.body, tc.says)
		}
	}

	// The same request produced straight to Kafka: the pusher answers
	// CLIENT_ERROR naming the rule, and stores the classic series.
	direct := utf8Request(ts)
	direct.Timeseries[2].Labels[0].Value = "classic_direct_total"
	produceRecords(t, manualClient(t, b), &kgo.Record{Topic: topic, Partition: 0, Key: []byte(gatewayTenant), Value: marshal(t, direct)})
	waitCommittedToEnd(t, b, group, topic, time.Minute)
	if st := c.Consumer.Stats(); st.Acks["client_error"] != 1 || st.Acks["ok"] != 1 || st.Acks["server_error"] != 0 {
		t.Errorf("consumer acks %v; want one ok (the gateway's classic series) and one client_error (the record produced straight)", st.Acks)
	}
	var reason string
	waitFor(t, 10*time.Second, "the consumer to log the client error", func() bool {
		var ok bool
		reason, ok = logAttr(log.String(), "skipping record: client error", "reason")
		return ok
	})
	if !strings.Contains(reason, metricRule) || !strings.Contains(reason, "(1 accepted, 2 rejected)") {
		t.Errorf("the pusher's reason %q, want it to name the rule (%s) and the counts", reason, metricRule)
	}
	if ack := pushOneAnswer(t, pp, gatewayTenant, onlyLabel); ack.Status != ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR ||
		!strings.Contains(ack.Reason, `invalid label name "service.name" (-limits.name-validation-scheme=legacy`) {
		t.Errorf("PushOne of a dotted label name: %v %q, want CLIENT_ERROR naming the rule", ack.Status, ack.Reason)
	}

	// Classic names are stored as before, whichever door they came through.
	for _, q := range []string{`classic_total{job="api"}`, `classic_direct_total{job="api"}`} {
		if v := queryValue(t, pp.HTTPAddr(), gatewayTenant, q, ts); v != 3 {
			t.Errorf("%s = %v, want 3", q, v)
		}
	}
	if code, a := getAPI(t, "http://"+pp.HTTPAddr(), gatewayTenant, "/api/v1/label/__name__/values", nil); code != http.StatusOK ||
		compactJSON(t, a.Data) != `["classic_direct_total","classic_total"]` {
		t.Errorf("metric names stored: HTTP %d %s, want only the classic ones", code, a.Data)
	}
}

// compactJSON is data without insignificant space.
func compactJSON(t *testing.T, data json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, data); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	return b.String()
}

func mapsEqual(a, b map[string]string) bool {
	ka, kb := make([]string, 0, len(a)), make([]string, 0, len(b))
	for k := range a {
		ka = append(ka, k)
	}
	for k := range b {
		kb = append(kb, k)
	}
	slices.Sort(ka)
	slices.Sort(kb)
	if !slices.Equal(ka, kb) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
