package gateway

import (
	"bytes"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"

	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"

	"github.com/klauspost/compress/snappy"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/proto/wire"
)

// The one documented ratio every decoder of every door respects: what a
// request allocates while it is decoded, checked, converted and split
// into records, garbage included, is at most wire.MaxAllocFactor times
// wire.MaxDecodedBytes of its decompressed size (3 × (16 bytes per byte
// + 4 KiB)), plus a fixed allowance for the HTTP machinery around it.
const httpAllowance = 64 << 10

func allocBound(n int) uint64 {
	return uint64(wire.MaxAllocFactor*wire.MaxDecodedBytes(wire.DefaultMaxExpansion, n) + httpAllowance)
}

// field is a length-delimited protobuf field of the given number.
func bytesField(num protowire.Number, parts ...[]byte) []byte {
	v := bytes.Join(parts, nil)
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// repeatTo repeats b to about size bytes.
func repeatTo(b []byte, size int) []byte { return bytes.Repeat(b, max(1, size/len(b))) }

// hostileV1 are remote-write 1.0 bodies built for the most allocation per
// byte: every repeated field empty or minimal, repeated.
func hostileV1(size int) map[string][]byte {
	label := bytesField(1, bytesField(1, []byte("__name__")), bytesField(2, []byte("m")))
	series := func(parts ...[]byte) []byte { return bytesField(1, append([][]byte{label}, parts...)...) }
	return map[string][]byte{
		"empty series":                         repeatTo([]byte{0x0a, 0x00}, size),
		"series of one empty label":            repeatTo([]byte{0x0a, 0x02, 0x0a, 0x00}, size),
		"empty labels in one series":           bytesField(1, repeatTo([]byte{0x0a, 0x00}, size)),
		"empty samples in one series":          series(repeatTo([]byte{0x12, 0x00}, size)),
		"empty samples in many series":         repeatTo(series(repeatTo([]byte{0x12, 0x00}, 200)), size),
		"empty exemplars in many series":       repeatTo(series(repeatTo([]byte{0x1a, 0x00}, 200)), size),
		"empty exemplar labels":                series([]byte{0x12, 0x00}, bytesField(3, repeatTo([]byte{0x0a, 0x00}, size))),
		"empty histograms in many series":      repeatTo(series(repeatTo([]byte{0x22, 0x00}, 200)), size),
		"empty spans in one histogram":         series(bytesField(4, repeatTo([]byte{0x42, 0x00}, size))),
		"unpacked deltas in one histogram":     series(bytesField(4, repeatTo([]byte{0x48, 0x00}, size))),
		"packed counts in one histogram":       series(bytesField(4, bytesField(13, repeatTo([]byte{0}, size)))),
		"empty metadata":                       repeatTo([]byte{0x1a, 0x00}, size),
		"a series declaring 2^62 bytes":        append([]byte{0x0a}, protowire.AppendVarint(nil, 1<<62)...),
		"a label value declaring the body":     series(bytesField(1, append([]byte{0x12}, protowire.AppendVarint(nil, uint64(size))...))),
		"metadata of long help, many families": repeatTo(bytesField(3, bytesField(2, []byte("m")), bytesField(4, []byte(strings.Repeat("h", 2000)))), size),
	}
}

// hostileV2 are remote-write 2.0 bodies built the same way, with symbol
// tables referenced many times (1.0 repeats each reference's string).
func hostileV2(size int) map[string][]byte {
	symbols := bytes.Join([][]byte{bytesField(4, nil), bytesField(4, []byte("__name__")), bytesField(4, []byte("m"))}, nil)
	big := bytesField(4, []byte(strings.Repeat("v", 4000))) // symbol 3
	series := func(parts ...[]byte) []byte {
		return bytesField(5, append([][]byte{bytesField(1, []byte{1, 2})}, parts...)...)
	}
	unknown := []byte{0x30, 0x01} // field 6, a varint: the fast decoder declines
	return map[string][]byte{
		"empty series":                     append(symbols, repeatTo([]byte{0x2a, 0x00}, size)...),
		"empty symbols":                    repeatTo([]byte{0x22, 0x00}, size),
		"empty symbols, generated decoder": append(repeatTo([]byte{0x22, 0x00}, size), unknown...),
		"a big symbol in every series":     append(append(symbols, big...), repeatTo(bytesField(5, bytesField(1, []byte{1, 3})), size)...),
		"a big symbol many times in one":   append(append(symbols, big...), bytesField(5, bytesField(1, repeatTo([]byte{1, 3}, size)))...),
		"empty samples in many series":     append(symbols, repeatTo(series(repeatTo([]byte{0x12, 0x00}, 200)), size)...),
		"empty histograms in many series":  append(symbols, repeatTo(series(repeatTo([]byte{0x1a, 0x00}, 200)), size)...),
		"empty spans in one histogram":     append(symbols, series(bytesField(3, repeatTo([]byte{0x5a, 0x00}, size)))...),
		"counts repeated in one histogram": append(symbols, series(bytesField(3, repeatTo([]byte{0x08, 0x01}, size)))...),
		"packed deltas in one histogram":   append(symbols, series(bytesField(3, bytesField(12, repeatTo([]byte{0}, size))))...),
		"empty exemplars in many series":   append(symbols, repeatTo(series([]byte{0x12, 0x00}, repeatTo([]byte{0x22, 0x00}, 200)), size)...),
		"metadata in every series":         append(append(symbols, big...), repeatTo(series(bytesField(5, []byte{0x18, 3})), size)...),
		"a series declaring 2^62 bytes":    append([]byte{0x2a}, protowire.AppendVarint(nil, 1<<62)...),
		"label references to every symbol": append(repeatTo(bytesField(4, []byte("s")), size/2), bytesField(5, bytesField(1, repeatTo([]byte{1}, size/2)))...),
	}
}

// allocated returns the bytes f allocates, garbage included.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDecodersAllocateInProportionToTheirInput sends every hostile shape
// through every decoder a door uses: the gateway's remote-write 1.0 and
// 2.0 paths whole (decompress, decode, check, convert, split), and the
// pusher's wire.Decoder with the pusher's limits. Not parallel: the
// memory statistics count every goroutine's allocations.
func TestDecodersAllocateInProportionToTheirInput(t *testing.T) {
	const size = 1 << 20
	g := newTestGateway(t, &fakeProducer{}, nil)
	check := func(t *testing.T, raw []byte, alloc uint64, answer string) {
		t.Helper()
		t.Logf("%d bytes allocated for %d bytes (%.1f×): %s", alloc, len(raw), float64(alloc)/float64(len(raw)), answer)
		if alloc > allocBound(len(raw)) {
			t.Errorf("%d bytes allocated for %d bytes of input, over the bound of %d (%d× + %d)", alloc, len(raw), allocBound(len(raw)), wire.MaxAllocFactor*wire.DefaultMaxExpansion, httpAllowance)
		}
	}
	for name, raw := range hostileV1(size) {
		t.Run("gateway 1.0: "+name, func(t *testing.T) {
			body := snappy.Encode(nil, raw)
			var code int
			alloc := allocated(func() { code = post(t, g, "/api/v1/push", ctV1, "t", body).Code })
			check(t, raw, alloc, http.StatusText(code))
		})
		t.Run("pusher: "+name, func(t *testing.T) {
			d := wire.Decoder{Limits: g.cfg.Limits.Wire()}
			var err error
			alloc := allocated(func() { err = d.Decode(raw, new(prompb.WriteRequest)) })
			check(t, raw, alloc, errString(err))
		})
	}
	for name, raw := range hostileV2(size) {
		t.Run("gateway 2.0: "+name, func(t *testing.T) {
			body := snappy.Encode(nil, raw)
			var code int
			alloc := allocated(func() { code = post(t, g, "/api/v1/push", ctV2, "t", body).Code })
			check(t, raw, alloc, http.StatusText(code))
		})
	}
	if n := g.inflight.bytes(); n != 0 {
		t.Errorf("%d in-flight bytes still held after every answer", n)
	}
}

func errString(err error) string {
	if err == nil {
		return "accepted"
	}
	s := err.Error()
	return s[:min(len(s), 100)]
}

// realV2 is a remote-write 2.0 request as Prometheus writes one: series
// of a dozen labels from a shared symbols table, a sample each, metadata,
// and, when rich, a native histogram and an exemplar each too.
func realV2(series int, rich bool) *writev2.Request {
	req := &writev2.Request{Symbols: []string{""}}
	sym := map[string]uint32{"": 0}
	ref := func(s string) uint32 {
		r, ok := sym[s]
		if !ok {
			r = uint32(len(req.Symbols))
			sym[s] = r
			req.Symbols = append(req.Symbols, s)
		}
		return r
	}
	for i := range series {
		refs := []uint32{ref("__name__"), ref(fmt.Sprintf("node_metric_%d_total", i%50))}
		for _, l := range []string{"cluster", "container", "endpoint", "instance", "job", "namespace", "pod", "service", "device", "mode"} {
			refs = append(refs, ref(l), ref(fmt.Sprintf("%s-value-%d", l, i%97)))
		}
		ts := writev2.TimeSeries{
			LabelsRefs: refs,
			Samples:    []writev2.Sample{{Value: float64(i), Timestamp: nowMs()}},
			Metadata:   writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_COUNTER, HelpRef: ref("Total of something, as the exporter counts it."), UnitRef: ref("")},
		}
		if rich {
			ts.Samples = nil
			ts.Histograms = []writev2.Histogram{{Count: &writev2.Histogram_CountInt{CountInt: 12}, Sum: 5, Schema: 3, ZeroCount: &writev2.Histogram_ZeroCountInt{ZeroCountInt: 0},
				PositiveSpans: []writev2.BucketSpan{{Offset: 0, Length: 4}, {Offset: 3, Length: 2}}, PositiveDeltas: []int64{1, 1, 0, 1, -1, 0}, Timestamp: nowMs()}}
			ts.Exemplars = []writev2.Exemplar{{LabelsRefs: []uint32{ref("trace_id"), ref(fmt.Sprintf("%016x", i))}, Value: 1, Timestamp: nowMs()}}
		}
		req.Timeseries = append(req.Timeseries, ts)
	}
	return req
}

// TestRealRequestsAreWellUnderTheBound: the bound refuses shapes, not
// real requests. Each kind is accepted, and its counted cost is at most
// half the bound.
func TestRealRequestsAreWellUnderTheBound(t *testing.T) {
	t.Parallel()
	for name, req := range map[string]*writev2.Request{
		"2.0, 2000 series of floats":                   realV2(2000, false),
		"2.0, 500 series of histograms with exemplars": realV2(500, true),
		"2.0, 1 series":                                realV2(1, false),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raw := mustMarshal(t, req)
			bound := wire.MaxAllocFactor * wire.MaxDecodedBytes(wire.DefaultMaxExpansion, len(raw))
			c, _, err := v2Cost(raw, bound, nil)
			t.Logf("%d bytes cost %d (%.1f×)", len(raw), c.cost, float64(c.cost)/float64(len(raw)))
			if err != nil || c.cost > bound/2 {
				t.Errorf("counted cost %d, error %v; want at most half the bound of %d", c.cost, err, bound)
			}
			g := newTestGateway(t, &fakeProducer{}, nil)
			if w := post(t, g, "/api/v1/push", ctV2, "t", snappy.Encode(nil, raw)); w.Code != http.StatusNoContent {
				t.Errorf("status %d: %s", w.Code, w.Body)
			}
		})
	}
}

// TestDecodingWaitsForRoomInTheInflightBytes: what a request may cost once
// decoded is held before decoding, so a request that does not fit beside
// the others is told to retry, and one that could never fit is refused.
func TestDecodingWaitsForRoomInTheInflightBytes(t *testing.T) {
	t.Parallel()
	raw := mustMarshal(t, realV2(200, false))
	c, _, err := v2Cost(raw, 1<<30, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Room for the body and its decompressed bytes, not for decoding.
	limit := int64(2*len(raw) + c.cost/2)
	g := newTestGateway(t, &fakeProducer{}, func(cfg *Config) { cfg.MaxRequestBytes = 2 * len(raw); cfg.MaxInflightBytes = limit })
	w := post(t, g, "/api/v1/push", ctV2, "t", snappy.Encode(nil, raw))
	if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), "-gateway.max-inflight-bytes") {
		t.Errorf("a request whose decoding alone is over the bound: %d %q, want 413 naming the flag", w.Code, w.Body)
	}
	g = newTestGateway(t, &fakeProducer{}, func(cfg *Config) { cfg.MaxRequestBytes = 2 * len(raw); cfg.MaxInflightBytes = 4 * int64(c.cost) })
	if !g.inflight.acquire(3 * int64(c.cost)) { // other requests hold most of it
		t.Fatal("could not take the bytes of the other requests")
	}
	w = post(t, g, "/api/v1/push", ctV2, "t", snappy.Encode(nil, raw))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("a request without room beside the others: %d (Retry-After %q), want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	g.inflight.release(3 * int64(c.cost))
	if w = post(t, g, "/api/v1/push", ctV2, "t", snappy.Encode(nil, raw)); w.Code != http.StatusNoContent {
		t.Errorf("the same request with room: %d %q, want 204", w.Code, w.Body)
	}
	if n := g.inflight.bytes(); n != 0 {
		t.Errorf("%d bytes still held", n)
	}
}
