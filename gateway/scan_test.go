package gateway

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/common/model"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/proto/wire"
)

// answerBothWays posts the decompressed body raw to a gateway that scans
// and to one that does not, and fails t when their answers or records
// differ. It reports whether the scanning gateway forwards raw after
// scanning it.
func answerBothWays(t *testing.T, raw []byte, mutate func(*Config)) (scanned bool) {
	t.Helper()
	fast, slow := &fakeProducer{}, &fakeProducer{}
	gFast := newTestGateway(t, fast, mutate)
	_, scanned = gFast.scan(new(wire.Decoder), raw, V1, time.Now())
	body := snappy.Encode(nil, raw)
	gSlow := newTestGateway(t, slow, mutate)
	gSlow.noScan = true
	wFast := post(t, gFast, "/api/v1/push", ctV1, "tenant-1", body)
	wSlow := post(t, gSlow, "/api/v1/push", ctV1, "tenant-1", body)
	if wFast.Code != wSlow.Code || wFast.Body.String() != wSlow.Body.String() {
		t.Fatalf("scanned: %d %q; decoded: %d %q", wFast.Code, wFast.Body, wSlow.Code, wSlow.Body)
	}
	tf, vf := fast.records()
	ts, vs := slow.records()
	if !slices.Equal(tf, ts) || !slices.EqualFunc(vf, vs, bytes.Equal) {
		t.Fatalf("scanned: %d records; decoded: %d records, or different ones", len(vf), len(vs))
	}
	return scanned
}

// TestAScannedRequestIsAnsweredAsADecodedOne covers the requests scan
// forwards and those it leaves to the decoding path, next to each
// other: the answers and records must be the same either way.
func TestAScannedRequestIsAnsweredAsADecodedOne(t *testing.T) {
	t.Parallel()
	good := func() *prompb.WriteRequest { return v1Request(4) }
	for _, tc := range []struct {
		name    string
		req     func() *prompb.WriteRequest
		mutate  func(*Config)
		scanned bool // forwarded after scanning
	}{
		{name: "valid", req: good, scanned: true},
		{name: "empty", req: func() *prompb.WriteRequest { return &prompb.WriteRequest{} }, scanned: true},
		{name: "bad label name", req: func() *prompb.WriteRequest {
			r := good()
			r.Timeseries[2].Labels[1].Name = "in\xffstance"
			return r
		}},
		{name: "UTF-8 names", req: func() *prompb.WriteRequest {
			r := good()
			r.Timeseries[2].Labels[0].Value = "http.server.request.duration"
			r.Timeseries[2].Labels[1].Name = "service.name"
			return r
		}, scanned: true},
		{name: "UTF-8 names under legacy", req: func() *prompb.WriteRequest {
			r := good()
			r.Timeseries[2].Labels[1].Name = "service.name"
			return r
		}, mutate: func(c *Config) { c.Limits.NameValidation = model.LegacyValidation }},
		{name: "value not UTF-8", req: func() *prompb.WriteRequest {
			r := good()
			r.Timeseries[0].Labels[1].Value = "\xff"
			return r
		}},
		{name: "unsorted labels", req: func() *prompb.WriteRequest {
			r := good()
			slices.Reverse(r.Timeseries[1].Labels)
			return r
		}},
		{name: "sample in the future", req: func() *prompb.WriteRequest {
			r := good()
			r.Timeseries[3].Samples[0].Timestamp += 3_600_000
			return r
		}},
		{name: "metadata", req: func() *prompb.WriteRequest {
			r := good()
			r.Metadata = []prompb.MetricMetadata{{MetricFamilyName: "up", Help: "h"}}
			return r
		}},
		{name: "over the tenant burst", req: good, mutate: func(c *Config) { c.TenantBurst = 2 }, scanned: true},
		{name: "over the record size", req: func() *prompb.WriteRequest { return v1Request(60) }, mutate: func(c *Config) { c.MaxRecordBytes = 1024 }},
		{name: "value over its limit", req: func() *prompb.WriteRequest {
			r := good()
			r.Timeseries[1].Labels[1].Value = strings.Repeat("v", 100)
			return r
		}, mutate: func(c *Config) { c.Limits.MaxLabelValueLength = 99 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw, err := tc.req().Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if scanned := answerBothWays(t, raw, tc.mutate); scanned != tc.scanned {
				t.Fatalf("scanned %v, want %v", scanned, tc.scanned)
			}
		})
	}
}

// FuzzScanPath posts arbitrary decompressed bodies both ways.
func FuzzScanPath(f *testing.F) {
	for _, req := range []*prompb.WriteRequest{v1Request(3), {}} {
		b, err := req.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		answerBothWays(t, raw, nil)
	})
}
