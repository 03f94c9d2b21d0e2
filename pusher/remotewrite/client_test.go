package remotewrite

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// testConfig is the flag defaults with url set.
func testConfig(url string) Config {
	var cfg Config
	cfg.RegisterFlags(flag.NewFlagSet("test", flag.PanicOnError))
	cfg.URL = url
	return cfg
}

// newTestClient returns a client on its own registry, closed at the end
// of the test.
func newTestClient(t *testing.T, cfg Config) (*Client, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	c, err := New(cfg, reg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, reg
}

// testRequest has two series with samples, an exemplar, a histogram and
// metadata: every part of a WriteRequest the receiver must get back.
func testRequest() *prompb.WriteRequest {
	return &prompb.WriteRequest{
		Timeseries: []prompb.TimeSeries{
			{
				Labels:    []prompb.Label{{Name: "__name__", Value: "up"}, {Name: "job", Value: "a"}},
				Samples:   []prompb.Sample{{Value: 1, Timestamp: 1000}, {Value: 0, Timestamp: 2000}},
				Exemplars: []prompb.Exemplar{{Labels: []prompb.Label{{Name: "trace_id", Value: "abc"}}, Value: 1, Timestamp: 1000}},
			},
			{
				Labels:     []prompb.Label{{Name: "__name__", Value: "latency"}},
				Histograms: []prompb.Histogram{{Count: &prompb.Histogram_CountInt{CountInt: 3}, Sum: 1.5, Schema: 1, Timestamp: 3000}},
			},
		},
		Metadata: []prompb.MetricMetadata{{MetricFamilyName: "up", Help: "Whether the target is up.", Type: prompb.MetricMetadata_METRIC_TYPE_GAUGE}},
	}
}

// counterValue returns the value of a counter (with code label value
// code, unless code is "") on reg, 0 when absent.
func counterValue(t *testing.T, reg *prometheus.Registry, name, code string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if code == "" || labelValue(m, "code") == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// captured is one request a recording receiver got.
type captured struct {
	header http.Header
	body   []byte // decompressed
	proto  int    // HTTP major version
}

// recordingReceiver answers 204 to everything and keeps what it got.
type recordingReceiver struct {
	mu   sync.Mutex
	got  []captured
	errs []error
}

func (rr *recordingReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	compressed, err := io.ReadAll(r.Body)
	var body []byte
	if err == nil {
		body, err = snappy.Decode(nil, compressed)
	}
	rr.mu.Lock()
	rr.got = append(rr.got, captured{header: r.Header.Clone(), body: body, proto: r.ProtoMajor})
	if err != nil {
		rr.errs = append(rr.errs, err)
	}
	rr.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (rr *recordingReceiver) only(t *testing.T) captured {
	t.Helper()
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if len(rr.errs) > 0 {
		t.Fatalf("receiver: %v", rr.errs)
	}
	if len(rr.got) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(rr.got))
	}
	return rr.got[0]
}

func pushOne(t *testing.T, c *Client, tenant string, req *prompb.WriteRequest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.Push(ctx, tenant, req)
	if err != nil {
		t.Fatalf("Push: %v", err)
	}
	if res.Accepted != 4 || res.Rejected != 0 {
		t.Errorf("Result = %+v, want 4 accepted", res)
	}
}

func TestBodyDecodesToTheSameRequest(t *testing.T) {
	t.Parallel()
	rr := &recordingReceiver{}
	srv := httptest.NewServer(rr)
	t.Cleanup(srv.Close)
	c, _ := newTestClient(t, testConfig(srv.URL))
	want := testRequest()
	pushOne(t, c, "tenant-a", want)
	var got prompb.WriteRequest
	if err := got.Unmarshal(rr.only(t).body); err != nil {
		t.Fatalf("the body is not a WriteRequest: %v", err)
	}
	if got.String() != want.String() {
		t.Errorf("the receiver decoded\n%v\nwant\n%v", &got, want)
	}
}

func TestPushRawSendsTheBytesAsReceived(t *testing.T) {
	t.Parallel()
	rr := &recordingReceiver{}
	srv := httptest.NewServer(rr)
	t.Cleanup(srv.Close)
	c, _ := newTestClient(t, testConfig(srv.URL))
	req := testRequest()
	raw, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// Unknown field 99 (varint 1): a re-encoding would drop it, so seeing it
	// at the receiver proves the bytes were forwarded as they were.
	raw = append(raw, 0x98, 0x06, 0x01)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.PushRaw(ctx, "tenant-a", raw, backend.Count(req))
	if err != nil || res.Accepted != 4 {
		t.Fatalf("PushRaw = %+v, %v; want 4 accepted", res, err)
	}
	if got := rr.only(t).body; !bytes.Equal(got, raw) {
		t.Errorf("the receiver got %x, want the raw bytes %x", got, raw)
	}
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	password := writeFile(t, dir, "password", "s3cret\n")
	token := writeFile(t, dir, "token", "tok-123\n")
	standard := map[string]string{
		"Content-Encoding":                  "snappy",
		"Content-Type":                      "application/x-protobuf",
		"X-Prometheus-Remote-Write-Version": "0.1.0",
		"User-Agent":                        "ferry/dev",
	}
	for _, tc := range []struct {
		name   string
		config func(*Config)
		want   map[string]string // "" means absent
	}{
		{
			name:   "the standard headers and the tenant in X-Scope-OrgID are sent",
			config: func(*Config) {},
			want:   map[string]string{"X-Scope-OrgID": "tenant-a", "Authorization": ""},
		},
		{
			name:   "the tenant goes in the header -remote-write.tenant-header names",
			config: func(c *Config) { c.TenantHeader = "THANOS-TENANT" },
			want:   map[string]string{"Thanos-Tenant": "tenant-a", "X-Scope-OrgID": ""},
		},
		{
			name:   "no tenant header is sent with -remote-write.send-tenant=false",
			config: func(c *Config) { c.SendTenant = false },
			want:   map[string]string{"X-Scope-OrgID": ""},
		},
		{
			name: "extra headers are sent",
			config: func(c *Config) {
				mustSet(t, &c.Headers, "X-One=1, X-Two = two")
				mustSet(t, &c.Headers, "X-Three=3")
			},
			want: map[string]string{"X-One": "1", "X-Two": "two", "X-Three": "3"},
		},
		{
			name: "basic auth takes the password from its file without the newline",
			config: func(c *Config) {
				c.BasicAuthUsername = "ferry"
				c.BasicAuthPasswordFile = password
			},
			want: map[string]string{"Authorization": "Basic ZmVycnk6czNjcmV0"}, // ferry:s3cret
		},
		{
			name:   "a bearer token is read from its file",
			config: func(c *Config) { c.BearerTokenFile = token },
			want:   map[string]string{"Authorization": "Bearer tok-123"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rr := &recordingReceiver{}
			srv := httptest.NewServer(rr)
			t.Cleanup(srv.Close)
			cfg := testConfig(srv.URL)
			tc.config(&cfg)
			c, _ := newTestClient(t, cfg)
			pushOne(t, c, "tenant-a", testRequest())
			h := rr.only(t).header
			for name, want := range standard {
				if got := h.Get(name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
			for name, want := range tc.want {
				if got := h.Get(name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
		})
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustSet(t *testing.T, h *Headers, v string) {
	t.Helper()
	if err := h.Set(v); err != nil {
		t.Fatalf("Headers.Set(%q): %v", v, err)
	}
}

// TestConnectionsAreReused sends requests one after another and counts
// the connections the receiver saw: keep-alive means one.
func TestConnectionsAreReused(t *testing.T) {
	t.Parallel()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(&recordingReceiver{})
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c, _ := newTestClient(t, testConfig(srv.URL))
	for range 20 {
		pushOne(t, c, "tenant-a", testRequest())
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("20 requests in a row used %d connections, want 1", n)
	}
}
