package pusher

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/proto/wire"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// rawCall is one request a rawBackend was given: by PushRaw (raw) or by
// Push, with the bytes it stands for.
type rawCall struct {
	raw     bool
	tenant  string
	body    []byte // the encoded write request
	samples int64
}

// rawBackend is a RawPusher that records every request it is given.
type rawBackend struct {
	stubBackend
	mu    sync.Mutex
	calls []rawCall
}

func (b *rawBackend) Push(_ context.Context, tenant string, req *prompb.WriteRequest) (backend.Result, error) {
	body, err := req.Marshal()
	if err != nil {
		return backend.Result{}, err
	}
	return b.record(rawCall{tenant: tenant, body: body, samples: backend.Count(req)})
}

func (b *rawBackend) PushRaw(_ context.Context, tenant string, raw []byte, samples int64) (backend.Result, error) {
	return b.record(rawCall{raw: true, tenant: tenant, body: bytes.Clone(raw), samples: samples})
}

func (b *rawBackend) record(c rawCall) (backend.Result, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, c)
	return backend.Result{Accepted: c.samples}, nil
}

// only returns the one call the backend got, or fails the test.
func (b *rawBackend) only(t *testing.T) rawCall {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.calls) != 1 {
		t.Fatalf("the backend got %d requests, want 1", len(b.calls))
	}
	return b.calls[0]
}

func TestRawPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		unary   bool
		mangle  func(*ferryv1.PushRequest)
		wantRaw bool
	}{
		{"a whole request on a stream goes the raw path", false, func(*ferryv1.PushRequest) {}, true},
		{"a request validation shortened goes through Push", false, func(r *ferryv1.PushRequest) {
			r.WriteRequest.Timeseries[0].Labels[0].Value = "0bad\xff metric name"
		}, false},
		{"a request with a bad series of no samples goes through Push", false, func(r *ferryv1.PushRequest) {
			r.WriteRequest.Timeseries[0].Labels[0].Value = "0bad\xff metric name"
			r.WriteRequest.Timeseries[0].Samples = nil
		}, false},
		{"a whole request Scan declines goes the raw path too", false, func(r *ferryv1.PushRequest) {
			r.WriteRequest.Metadata = []prompb.MetricMetadata{{MetricFamilyName: "up", Help: "up"}}
		}, true},
		{"a whole PushOne request goes the raw path too", true, func(*ferryv1.PushRequest) {}, true},
		{"a PushOne request validation shortened goes through Push", true, func(r *ferryv1.PushRequest) {
			r.WriteRequest.Timeseries[0].Labels[0].Value = "0bad\xff metric name"
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := &rawBackend{}
			h := startServer(t, testConfig(t), b)
			req := pushRequest(1, "tenant-a", 3)
			tc.mangle(req)
			sent, err := req.WriteRequest.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			pushVia(testContext(t), t, h.client, tc.unary, req)
			got := b.only(t)
			if got.raw != tc.wantRaw {
				t.Errorf("PushRaw called: %v; want the raw path: %v", got.raw, tc.wantRaw)
			}
			if got.raw && (!bytes.Equal(got.body, sent) || got.samples != backend.Count(&req.WriteRequest)) {
				t.Errorf("PushRaw got %d bytes and %d samples, want the request's %d bytes and %d samples",
					len(got.body), got.samples, len(sent), backend.Count(&req.WriteRequest))
			}
		})
	}
}

// TestDecodeScansOnlyForARawBackend checks that a request in the shape
// Prometheus sends reaches a raw backend without being decoded (the point
// of the scan), whatever its timestamps, since those are checked when it
// is applied; any other shape is decoded.
func TestDecodeScansOnlyForARawBackend(t *testing.T) {
	t.Parallel()
	rules := testConfig(t).Limits.LabelRules()
	future := pushRequest(1, "tenant-a", 3)
	future.WriteRequest.Timeseries[1].Samples[0].Timestamp = time.Now().Add(time.Hour).UnixMilli()
	withMetadata := pushRequest(1, "tenant-a", 3)
	withMetadata.WriteRequest.Metadata = []prompb.MetricMetadata{{MetricFamilyName: "up", Help: "up"}}
	for _, tc := range []struct {
		name        string
		req         *ferryv1.PushRequest
		rules       *wire.LabelRules
		wantScanned bool
	}{
		{"Prometheus's shape", pushRequest(1, "tenant-a", 3), &rules, true},
		{"a sample from the future", future, &rules, true},
		{"metadata", withMetadata, &rules, false},
		{"no rules: a backend that needs the request decoded", pushRequest(1, "tenant-a", 3), nil, false},
	} {
		raw, err := tc.req.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		var env envelope
		if err := env.Unmarshal(raw); err != nil {
			t.Fatal(err)
		}
		r := env.decode(decoding{scan: tc.rules})
		if r.bad != nil {
			t.Fatalf("%s: %v", tc.name, r.bad)
		}
		if r.owner.scanned != tc.wantScanned {
			t.Errorf("%s: scanned %v, want %v", tc.name, r.owner.scanned, tc.wantScanned)
		}
		if decoded := len(r.req.WriteRequest.Timeseries) > 0; decoded == tc.wantScanned {
			t.Errorf("%s: %d series decoded, scanned %v", tc.name, len(r.req.WriteRequest.Timeseries), tc.wantScanned)
		}
		if tc.wantScanned && r.owner.sum.Samples != int(backend.Count(&tc.req.WriteRequest)) {
			t.Errorf("%s: Scan counted %d samples, want %d", tc.name, r.owner.sum.Samples, backend.Count(&tc.req.WriteRequest))
		}
		r.recycle()
	}
}

// scanCases are requests that a pusher answers in every way it can: each
// is pushRequest(1, tenant-a, 4) changed by the function.
var scanCases = []struct {
	name   string
	mangle func(r *ferryv1.PushRequest)
}{
	{"whole", func(*ferryv1.PushRequest) {}},
	{"a bad metric name", func(r *ferryv1.PushRequest) { r.WriteRequest.Timeseries[1].Labels[0].Value = "0bad\xff" }},
	{"a bad label of a series without samples", func(r *ferryv1.PushRequest) {
		r.WriteRequest.Timeseries[2].Labels[1].Name = "bad\xffname"
		r.WriteRequest.Timeseries[2].Samples = nil
	}},
	{"a label value over the limit", func(r *ferryv1.PushRequest) {
		r.WriteRequest.Timeseries[0].Labels[1].Value = strings.Repeat("v", 65)
	}},
	{"a label name over the limit", func(r *ferryv1.PushRequest) {
		ls := &r.WriteRequest.Timeseries[0].Labels
		*ls = append(*ls, prompb.Label{Name: "z" + strings.Repeat("n", 40), Value: "v"})
	}},
	{"too many labels", func(r *ferryv1.PushRequest) {
		ls := &r.WriteRequest.Timeseries[3].Labels
		for i := range 8 {
			*ls = append(*ls, prompb.Label{Name: fmt.Sprintf("z%d", i), Value: "v"})
		}
	}},
	{"duplicate label names", func(r *ferryv1.PushRequest) {
		ls := &r.WriteRequest.Timeseries[0].Labels
		*ls = append(*ls, (*ls)[len(*ls)-1])
	}},
	{"labels out of order", func(r *ferryv1.PushRequest) { slices.Reverse(r.WriteRequest.Timeseries[0].Labels) }},
	{"an empty label value", func(r *ferryv1.PushRequest) { r.WriteRequest.Timeseries[0].Labels[1].Value = "" }},
	{"a label value that is not UTF-8", func(r *ferryv1.PushRequest) { r.WriteRequest.Timeseries[0].Labels[1].Value = "\xff" }},
	{"no metric name", func(r *ferryv1.PushRequest) {
		r.WriteRequest.Timeseries[0].Labels = r.WriteRequest.Timeseries[0].Labels[1:]
	}},
	{"a sample from the future", func(r *ferryv1.PushRequest) {
		r.WriteRequest.Timeseries[1].Samples[0].Timestamp = time.Now().Add(time.Hour).UnixMilli()
	}},
	{"a sample past the grace period", func(r *ferryv1.PushRequest) {
		r.WriteRequest.Timeseries[2].Samples[0].Timestamp = time.Now().Add(-3 * time.Hour).UnixMilli()
	}},
	{"a sample before 1970", func(r *ferryv1.PushRequest) { r.WriteRequest.Timeseries[0].Samples[0].Timestamp = -1 }},
	{"no series", func(r *ferryv1.PushRequest) { r.WriteRequest.Timeseries = nil }},
	{"series without samples", func(r *ferryv1.PushRequest) {
		for i := range r.WriteRequest.Timeseries {
			r.WriteRequest.Timeseries[i].Samples = nil
		}
	}},
	{"an exemplar", func(r *ferryv1.PushRequest) {
		r.WriteRequest.Timeseries[0].Exemplars = []prompb.Exemplar{{Value: 1, Timestamp: r.WriteRequest.Timeseries[0].Samples[0].Timestamp}}
	}},
	{"metadata", func(r *ferryv1.PushRequest) {
		r.WriteRequest.Metadata = []prompb.MetricMetadata{{MetricFamilyName: "up", Help: "up"}}
	}},
	{"an empty tenant", func(r *ferryv1.PushRequest) { r.Tenant = "" }},
	{"a tenant that is not an ID", func(r *ferryv1.PushRequest) { r.Tenant = "../etc" }},
	{"over the request size limit", func(r *ferryv1.PushRequest) {
		ls := &r.WriteRequest.Timeseries[0].Labels
		for i := range 4 {
			(*ls)[1+i%(len(*ls)-1)].Value = strings.Repeat("v", 60)
		}
		r.WriteRequest.Timeseries = append(r.WriteRequest.Timeseries, r.WriteRequest.Timeseries...)
	}},
}

// TestAScannedRequestIsAnsweredAsADecodedOne is the differential test of
// the remote-write backend's single pass: a pusher that scans requests
// must answer each exactly as one that decodes and filters every request,
// and give the backend the same bytes by the same path.
func TestAScannedRequestIsAnsweredAsADecodedOne(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, "-limits.max-label-value-length", "64", "-limits.max-label-name-length", "32",
		"-limits.max-labels-per-series", "8", "-limits.past-grace-period", "2h", "-pusher.max-request-bytes", "700")
	// Both pushers judge the time bounds at one instant: the answer to a
	// sample past the grace period names the bound to the second, and the
	// two, asked a moment apart, could straddle a second.
	now := time.Now()
	start := func(scan bool) (*harness, *rawBackend) {
		b := &rawBackend{}
		srv := NewServer(cfg, b, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
		srv.applier.now = func() time.Time { return now }
		if srv.scan == nil {
			t.Fatal("a server with a raw backend does not scan")
		}
		if !scan {
			srv.scan = nil
		}
		return serve(t, cfg, srv), b
	}
	scanning, scanned := start(true)
	decoding, decoded := start(false)
	ctx := testContext(t)
	for i, tc := range scanCases {
		for _, unary := range []bool{false, true} {
			req := pushRequest(1, "tenant-a", 4)
			tc.mangle(req)
			name := fmt.Sprintf("%s (PushOne %v)", tc.name, unary)
			want := pushVia(ctx, t, decoding.client, unary, req)
			got := pushVia(ctx, t, scanning.client, unary, req)
			if got.String() != want.String() {
				t.Errorf("%s: answered %v, a decoding pusher %v", name, got, want)
			}
			scanned.mu.Lock()
			decoded.mu.Lock()
			if !slices.EqualFunc(scanned.calls, decoded.calls, rawCallsEqual) {
				t.Errorf("%s: the backend got %v, a decoding pusher's %v", name, summarise(scanned.calls), summarise(decoded.calls))
			}
			scanned.calls, decoded.calls = nil, nil
			scanned.mu.Unlock()
			decoded.mu.Unlock()
		}
		if i == 0 && t.Failed() {
			t.FailNow() // the cases below assume the plain one works
		}
	}
}

func rawCallsEqual(a, b rawCall) bool {
	return a.raw == b.raw && a.tenant == b.tenant && a.samples == b.samples && bytes.Equal(a.body, b.body)
}

func summarise(calls []rawCall) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = fmt.Sprintf("{raw %v, %q, %d bytes, %d samples}", c.raw, c.tenant, len(c.body), c.samples)
	}
	return out
}
