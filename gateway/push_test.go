package gateway

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/client_golang/prometheus"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ferrylabs/ferry/limits"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// fakeProducer records what it is asked to produce; err, when set, is
// returned instead.
type fakeProducer struct {
	mu      sync.Mutex
	tenants []string
	values  [][]byte
	err     error
}

func (f *fakeProducer) produce(_ context.Context, tenant string, values [][]byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	// A value is the gateway's again once produce returns.
	for _, v := range values {
		f.tenants = append(f.tenants, tenant)
		f.values = append(f.values, bytes.Clone(v))
	}
	return nil
}

func (f *fakeProducer) ready(context.Context) error { return nil }
func (f *fakeProducer) close()                      {}

func (f *fakeProducer) records() ([]string, [][]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.tenants...), append([][]byte(nil), f.values...)
}

// testConfig is the flag defaults with changes.
func testConfig(t *testing.T, mutate func(*Config)) Config {
	t.Helper()
	var cfg Config
	cfg.RegisterFlags(flag.NewFlagSet("", flag.PanicOnError))
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func newTestGateway(t *testing.T, p producer, mutate func(*Config)) *Gateway {
	t.Helper()
	return newGateway(testConfig(t, mutate), p, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
}

// nowMs is a timestamp the pusher's limits accept.
func nowMs() int64 { return time.Now().Add(-time.Minute).UnixMilli() }

func v1Request(series int) *prompb.WriteRequest {
	req := &prompb.WriteRequest{}
	for i := range series {
		req.Timeseries = append(req.Timeseries, prompb.TimeSeries{
			Labels:  []prompb.Label{{Name: "__name__", Value: "up"}, {Name: "instance", Value: strings.Repeat("i", 10) + string(rune('a'+i%26)) + strings.Repeat("x", i)}},
			Samples: []prompb.Sample{{Value: float64(i), Timestamp: nowMs()}},
		})
	}
	return req
}

func v1Body(t *testing.T, req *prompb.WriteRequest) []byte {
	t.Helper()
	b, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return snappy.Encode(nil, b)
}

func v2Body(t testing.TB) []byte {
	t.Helper()
	req := &writev2.Request{
		Symbols: []string{"", "__name__", "up", "job", "node", "help text", "seconds", "trace_id", "abc"},
		Timeseries: []writev2.TimeSeries{{
			LabelsRefs: []uint32{1, 2, 3, 4},
			Samples:    []writev2.Sample{{Value: 1, Timestamp: nowMs()}},
			Exemplars:  []writev2.Exemplar{{LabelsRefs: []uint32{7, 8}, Value: 1, Timestamp: nowMs()}},
			Histograms: []writev2.Histogram{{Count: &writev2.Histogram_CountInt{CountInt: 3}, Sum: 5, Schema: 1, ZeroCount: &writev2.Histogram_ZeroCountInt{ZeroCountInt: 1},
				PositiveSpans: []writev2.BucketSpan{{Offset: 0, Length: 2}}, PositiveDeltas: []int64{1, 0}, Timestamp: nowMs() + 1}},
			Metadata: writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_GAUGE, HelpRef: 5, UnitRef: 6},
		}},
	}
	b, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return snappy.Encode(nil, b)
}

const (
	ctV1 = "application/x-protobuf"
	ctV2 = "application/x-protobuf;proto=io.prometheus.write.v2.Request"
)

func post(t *testing.T, h http.Handler, path, ct, tenant string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	if ct != "" {
		r.Header.Set("Content-Type", ct)
	}
	r.Header.Set("Content-Encoding", "snappy")
	if tenant != "" {
		r.Header.Set("X-Scope-OrgID", tenant)
	}
	w := httptest.NewRecorder()
	mux := http.NewServeMux()
	h.(*Gateway).Register(mux)
	mux.ServeHTTP(w, r)
	return w
}

// snappyBomb is a tiny body whose header claims a decoded size of 1 GiB.
func snappyBomb() []byte {
	b := protowire.AppendVarint(nil, 1<<30)
	return append(b, 0x00)
}

func TestBadInputGetsTheStatusPrometheusActsOn(t *testing.T) {
	t.Parallel()
	wrongWire := snappy.Encode(nil, []byte{1 << 3, 5}) // field 1, timeseries, as a varint
	future := v1Request(1)
	future.Timeseries[0].Samples[0].Timestamp = time.Now().Add(time.Hour).UnixMilli()
	badLabel := v1Request(1)
	badLabel.Timeseries[0].Labels[1].Name = "bad\xffname"
	v1AsV2 := v1Body(t, v1Request(2))
	for _, tc := range []struct {
		name, ct, tenant string
		body             []byte
		mutate           func(*Config)
		want             int
		wantText         string
	}{
		{name: "an empty body is not snappy", ct: ctV1, tenant: "t", body: nil, want: 400, wantText: "snappy"},
		{name: "a body that is not snappy is refused", ct: ctV1, tenant: "t", body: []byte("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"), want: 400},
		{name: "a snappy bomb is refused from its header", ct: ctV1, tenant: "t", body: snappyBomb(), want: 413, wantText: "decompressed"},
		{name: "bytes that are not protobuf are refused", ct: ctV1, tenant: "t", body: snappy.Encode(nil, []byte("hello, world")), want: 400},
		{name: "a protobuf with the wrong wire types is refused", ct: ctV1, tenant: "t", body: wrongWire, want: 400},
		{name: "a 2.0 body labelled 1.0 is refused", ct: ctV1, tenant: "t", body: v2Body(t), want: 400, wantText: "2.0"},
		{name: "a 1.0 body labelled 2.0 is refused", ct: ctV2, tenant: "t", body: v1AsV2, want: 400, wantText: "1.0"},
		{name: "a missing content type is unsupported", ct: "", tenant: "t", body: v1AsV2, want: 415},
		{name: "a JSON content type is unsupported", ct: "application/json", tenant: "t", body: v1AsV2, want: 415},
		{name: "an unknown proto is unsupported", ct: "application/x-protobuf;proto=foo.Bar", tenant: "t", body: v1AsV2, want: 415},
		{name: "a request without tenant is unauthorized", ct: ctV1, body: v1AsV2, want: 401},
		{name: "a tenant with white space is refused", ct: ctV1, tenant: "a b", body: v1AsV2, want: 400, wantText: "tenant"},
		{name: "a tenant of 151 bytes is refused", ct: ctV1, tenant: strings.Repeat("a", 151), body: v1AsV2, want: 400},
		{name: "a tenant of dots is refused", ct: ctV1, tenant: "..", body: v1AsV2, want: 400},
		{name: "a compressed body over the limit is refused", ct: ctV1, tenant: "t", body: v1Body(t, v1Request(200)), mutate: func(c *Config) { c.MaxRequestBytes = 2000; c.MaxInflightBytes = 1 << 20 }, want: 413},
		{name: "a body over the limit only decompressed is refused", ct: ctV1, tenant: "t", body: snappy.Encode(nil, make([]byte, 5000)), mutate: func(c *Config) { c.MaxRequestBytes = 2000; c.MaxInflightBytes = 1 << 20 }, want: 413, wantText: "decompressed"},
		{name: "a bad label name is refused", ct: ctV1, tenant: "t", body: v1Body(t, badLabel), want: 400, wantText: "invalid label name"},
		{name: "a sample an hour in the future is refused", ct: ctV1, tenant: "t", body: v1Body(t, future), want: 400, wantText: "future"},
		{name: "a series larger than a record is refused", ct: ctV1, tenant: "t", body: v1Body(t, v1Request(1500)), mutate: func(c *Config) { c.MaxRecordBytes = 1024 }, want: 413, wantText: "record"},
		{name: "a request over the tenant burst is refused", ct: ctV1, tenant: "t", body: v1Body(t, v1Request(10)), mutate: func(c *Config) { c.TenantRateLimit = 1; c.TenantBurst = 5 }, want: 413, wantText: "burst"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := &fakeProducer{}
			w := post(t, newTestGateway(t, p, tc.mutate), "/api/v1/push", tc.ct, tc.tenant, tc.body)
			if w.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.want, w.Body)
			}
			if !strings.Contains(w.Body.String(), tc.wantText) {
				t.Errorf("body %q does not mention %q", w.Body, tc.wantText)
			}
			if _, values := p.records(); len(values) != 0 && tc.want != 400 {
				t.Errorf("%d records produced for a refused request", len(values))
			}
		})
	}
}

func TestAValidRequestIsProducedAsTheClientSentIt(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/api/v1/push", "/api/v1/write"} {
		p := &fakeProducer{}
		req := v1Request(3)
		req.Metadata = []prompb.MetricMetadata{{Type: prompb.MetricMetadata_METRIC_TYPE_GAUGE, MetricFamilyName: "up", Help: "h"}}
		w := post(t, newTestGateway(t, p, nil), path, ctV1+";proto=prometheus.WriteRequest", "tenant-1", v1Body(t, req))
		if w.Code != http.StatusNoContent {
			t.Fatalf("%s: status %d: %s", path, w.Code, w.Body)
		}
		tenants, values := p.records()
		want, _ := req.Marshal()
		if len(values) != 1 || tenants[0] != "tenant-1" || !bytes.Equal(values[0], want) {
			t.Fatalf("%s: produced %q / %d values, want the request's bytes under tenant-1", path, tenants, len(values))
		}
	}
}

func TestTheDefaultTenantNamesRequestsWithoutTheHeader(t *testing.T) {
	t.Parallel()
	p := &fakeProducer{}
	g := newTestGateway(t, p, func(c *Config) { c.DefaultTenant = "single"; c.TenantHeader = "X-Tenant" })
	if w := post(t, g, "/api/v1/write", ctV1, "", v1Body(t, v1Request(1))); w.Code != http.StatusNoContent {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if tenants, _ := p.records(); len(tenants) != 1 || tenants[0] != "single" {
		t.Fatalf("tenants %q, want [single]", tenants)
	}
}

// TestAValidPartOfARequestIsProducedBeforeTheBadPartIsRefused includes a
// bad series without samples: it drops no sample, yet the record must still
// leave it out, or the pusher would refuse it again.
func TestAValidPartOfARequestIsProducedBeforeTheBadPartIsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		samples bool
	}{{"a bad series with samples", true}, {"a bad series without samples", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := &fakeProducer{}
			req := v1Request(3)
			req.Timeseries[1].Labels[1].Name = "0bad\xff"
			if !tc.samples {
				req.Timeseries[1].Samples = nil
			}
			w := post(t, newTestGateway(t, p, nil), "/api/v1/push", ctV1, "t", v1Body(t, req))
			if w.Code != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %s", w.Code, w.Body)
			}
			_, values := p.records()
			if len(values) != 1 {
				t.Fatalf("%d records, want 1", len(values))
			}
			var got prompb.WriteRequest
			if err := got.Unmarshal(values[0]); err != nil || len(got.Timeseries) != 2 {
				t.Fatalf("record holds %d series (%v), want the 2 valid ones", len(got.Timeseries), err)
			}
		})
	}
}

func TestARemoteWrite2AnswerCountsOnlyTheSeriesWritten(t *testing.T) {
	t.Parallel()
	p := &fakeProducer{}
	req := &writev2.Request{
		Symbols: []string{"", "__name__", "up", "job", "node", "0bad\xff"},
		Timeseries: []writev2.TimeSeries{
			{LabelsRefs: []uint32{1, 2, 3, 4}, Samples: []writev2.Sample{{Value: 1, Timestamp: nowMs()}, {Value: 2, Timestamp: nowMs() + 1}}},
			{LabelsRefs: []uint32{1, 2, 5, 4}, Samples: []writev2.Sample{{Value: 3, Timestamp: nowMs()}}},
			{LabelsRefs: []uint32{1, 2, 5, 3}}, // bad labels, no samples
		},
	}
	b, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	w := post(t, newTestGateway(t, p, nil), "/api/v1/write", ctV2, "t", snappy.Encode(nil, b))
	if w.Code != http.StatusBadRequest {
		t.Fatalf("status %d, want 400: %s", w.Code, w.Body)
	}
	if got := w.Header().Get(headerSamplesWritten); got != "2" {
		t.Errorf("%s = %q, want the 2 samples of the valid series", headerSamplesWritten, got)
	}
	_, values := p.records()
	var got prompb.WriteRequest
	if len(values) != 1 || got.Unmarshal(values[0]) != nil || len(got.Timeseries) != 1 {
		t.Fatalf("records %d, want one with the valid series", len(values))
	}
}

func TestARemoteWrite2RequestIsConvertedAndAnsweredWithWhatWasWritten(t *testing.T) {
	t.Parallel()
	p := &fakeProducer{}
	w := post(t, newTestGateway(t, p, nil), "/api/v1/write", ctV2, "t", v2Body(t))
	if w.Code != http.StatusNoContent {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	// The default TSDB keeps no exemplar: none is claimed written.
	for h, want := range map[string]string{headerSamplesWritten: "1", headerHistogramsWritten: "1", headerExemplarsWritten: "0"} {
		if got := w.Header().Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	_, values := p.records()
	if len(values) != 1 {
		t.Fatalf("%d records, want 1", len(values))
	}
	var got prompb.WriteRequest
	if err := got.Unmarshal(values[0]); err != nil {
		t.Fatal(err)
	}
	ts := got.Timeseries[0]
	if pusherLabels := limits.FormatLabels(ts.Labels); pusherLabels != `{__name__="up", job="node"}` {
		t.Errorf("labels %s", pusherLabels)
	}
	if len(ts.Samples) != 1 || len(ts.Histograms) != 1 || ts.Histograms[0].GetCountInt() != 3 || len(ts.Exemplars) != 1 || ts.Exemplars[0].Labels[0].Value != "abc" {
		t.Errorf("series %+v lost data in the conversion", ts)
	}
	if len(got.Metadata) != 1 || got.Metadata[0].MetricFamilyName != "up" || got.Metadata[0].Help != "help text" || got.Metadata[0].Unit != "seconds" || got.Metadata[0].Type != prompb.MetricMetadata_METRIC_TYPE_GAUGE {
		t.Errorf("metadata %+v", got.Metadata)
	}
}

func TestExemplarsAreClaimedWrittenOnlyWhenTheyAreStored(t *testing.T) {
	t.Parallel()
	for stored, want := range map[bool]string{false: "0", true: "1"} {
		g := newTestGateway(t, &fakeProducer{}, func(c *Config) { c.ExemplarsStored = stored })
		w := post(t, g, "/api/v1/write", ctV2, "t", v2Body(t))
		if got := w.Header().Get(headerExemplarsWritten); w.Code != http.StatusNoContent || got != want {
			t.Errorf("-gateway.exemplars-stored=%v: status %d, %s = %q, want 204 and %q", stored, w.Code, headerExemplarsWritten, got, want)
		}
	}
}

func TestARemoteWrite2RequestWithABadSymbolReferenceIsRefused(t *testing.T) {
	t.Parallel()
	req := &writev2.Request{Symbols: []string{"", "__name__"}, Timeseries: []writev2.TimeSeries{{LabelsRefs: []uint32{1, 9}}}}
	b, _ := req.Marshal()
	w := post(t, newTestGateway(t, &fakeProducer{}, nil), "/api/v1/write", ctV2, "t", snappy.Encode(nil, b))
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "symbol") {
		t.Fatalf("status %d %q, want 400 naming the symbol", w.Code, w.Body)
	}
}

func TestALargeRequestIsSplitBySeriesIntoRecordsUnderTheLimit(t *testing.T) {
	t.Parallel()
	p := &fakeProducer{}
	req := v1Request(300)
	g := newTestGateway(t, p, func(c *Config) { c.MaxRecordBytes = 4096 })
	if w := post(t, g, "/api/v1/push", ctV1, "t", v1Body(t, req)); w.Code != http.StatusNoContent {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	_, values := p.records()
	if len(values) < 2 {
		t.Fatalf("%d records, want a split", len(values))
	}
	series := 0
	for _, v := range values {
		if len(v) > 4096 {
			t.Errorf("record of %d bytes over the limit", len(v))
		}
		var got prompb.WriteRequest
		if err := got.Unmarshal(v); err != nil {
			t.Fatal(err)
		}
		for _, ts := range got.Timeseries {
			if ts.Samples[0].Value != float64(series) {
				t.Fatalf("series %d out of order", series)
			}
			series++
		}
	}
	if series != 300 {
		t.Fatalf("%d series across the records, want 300", series)
	}
}

func TestATenantOverItsRateIsToldWhenToRetry(t *testing.T) {
	t.Parallel()
	p := &fakeProducer{}
	g := newTestGateway(t, p, func(c *Config) { c.TenantRateLimit = 1; c.TenantBurst = 10 })
	body := v1Body(t, v1Request(8))
	if w := post(t, g, "/api/v1/push", ctV1, "a", body); w.Code != http.StatusNoContent {
		t.Fatalf("first request: status %d", w.Code)
	}
	w := post(t, g, "/api/v1/push", ctV1, "a", body)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
		t.Fatalf("second request: status %d, Retry-After %q; want 429 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	if w := post(t, g, "/api/v1/push", ctV1, "b", body); w.Code != http.StatusNoContent {
		t.Fatalf("another tenant: status %d, want 204", w.Code)
	}
}

func TestKafkaErrorsAreServerErrors(t *testing.T) {
	t.Parallel()
	p := &fakeProducer{err: errors.New("broker gone")}
	w := post(t, newTestGateway(t, p, nil), "/api/v1/push", ctV1, "t", v1Body(t, v1Request(1)))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("status %d, want 503 with Retry-After", w.Code)
	}
}

// blockingProducer holds every produce until released.
type blockingProducer struct {
	fakeProducer
	entered chan struct{}
	release chan struct{}
}

func (b *blockingProducer) produce(ctx context.Context, tenant string, values [][]byte) error {
	b.entered <- struct{}{}
	<-b.release
	return b.fakeProducer.produce(ctx, tenant, values)
}

func TestRequestsOverTheInflightBytesAreRefusedAtOnce(t *testing.T) {
	t.Parallel()
	p := &blockingProducer{entered: make(chan struct{}, 1), release: make(chan struct{})}
	req := v1Request(50)
	body := v1Body(t, req)
	// What one request Scan vouches for holds: its body and its
	// decompressed bytes, which are the record.
	need := len(body) + req.Size()
	g := newTestGateway(t, p, func(c *Config) { c.MaxRequestBytes = need; c.MaxInflightBytes = int64(need + need/2) })
	done := make(chan int, 1)
	go func() { done <- post(t, g, "/api/v1/push", ctV1, "t", body).Code }()
	select {
	case <-p.entered:
	case code := <-done:
		t.Fatalf("first request answered %d before producing", code)
	case <-time.After(10 * time.Second):
		t.Fatal("first request never reached the producer")
	}
	if w := post(t, g, "/api/v1/push", ctV1, "t", body); w.Code != http.StatusServiceUnavailable {
		t.Errorf("second request while the first holds the bytes: status %d, want 503", w.Code)
	}
	close(p.release)
	if code := <-done; code != http.StatusNoContent {
		t.Errorf("first request: status %d", code)
	}
	if n := g.inflight.bytes(); n != 0 {
		t.Errorf("%d bytes still held after both answers", n)
	}
}

// keepingProducer keeps the values it is given without copying them, as
// a Kafka client does with records still in flight, and fails.
type keepingProducer struct {
	fakeProducer
	kept [][]byte
}

func (k *keepingProducer) produce(_ context.Context, _ string, values [][]byte) error {
	k.kept = append(k.kept, values...)
	return context.DeadlineExceeded
}

func TestAValueStillInFlightAfterATimeoutIsNotReused(t *testing.T) {
	t.Parallel()
	p := &keepingProducer{}
	g := newTestGateway(t, p, nil)
	first := v1Request(3)
	want, _ := first.Marshal()
	if w := post(t, g, "/api/v1/push", ctV1, "t", v1Body(t, first)); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", w.Code)
	}
	for i := range 20 { // requests of the same size, to reuse any buffer left
		req := v1Request(3)
		req.Timeseries[0].Samples[0].Value = float64(100 + i)
		post(t, g, "/api/v1/push", ctV1, "t", v1Body(t, req))
	}
	if !bytes.Equal(p.kept[0], want) {
		t.Fatal("the value of a request whose records may still be in flight was overwritten by a later request")
	}
}
