package wire

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	"github.com/klauspost/compress/snappy"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// pusherLimits are the pusher's default limits (limits.Limits).
var pusherLimits = Limits{MaxSeries: 20_000, MaxSamplesPerSeries: 20_000, MaxExpansion: DefaultMaxExpansion}

// repeatTo repeats unit until the result is at least n bytes.
func repeatTo(unit []byte, n int) []byte {
	return bytes.Repeat(unit, (n+len(unit)-1)/len(unit))
}

// seriesOf is a TimeSeries with one label and the fields inner.
func seriesOf(inner ...[]byte) []byte {
	return msgField(1, append([][]byte{msgField(1, labelMsg("a", "b"))}, inner...)...)
}

// hostileShapes are requests of about size bytes that repeat the cheapest
// encoding of one repeated field, at every level of a WriteRequest.
func hostileShapes(size int) []struct {
	name string
	b    []byte
} {
	emptyHistogram := msgField(4)
	return []struct {
		name string
		b    []byte
	}{
		{"empty series", repeatTo([]byte{0x0a, 0x00}, size)},
		{"series with one empty label", repeatTo([]byte{0x0a, 0x02, 0x0a, 0x00}, size)},
		{"empty labels in one series", msgField(1, repeatTo([]byte{0x0a, 0x00}, size))},
		{"empty samples in one series", seriesOf(repeatTo([]byte{0x12, 0x00}, size))},
		{"empty samples in many series", repeatTo(seriesOf(repeatTo([]byte{0x12, 0x00}, 200)), size)},
		{"empty exemplars in many series", repeatTo(seriesOf(repeatTo([]byte{0x1a, 0x00}, 200)), size)},
		{"empty exemplar labels", seriesOf(msgField(3, repeatTo([]byte{0x0a, 0x00}, size)))},
		{"empty histograms in many series", repeatTo(seriesOf(repeatTo(emptyHistogram, 200)), size)},
		{"empty bucket spans in one histogram", seriesOf(msgField(4, repeatTo([]byte{0x42, 0x00}, size)))},
		{"unpacked bucket deltas in one histogram", seriesOf(msgField(4, repeatTo([]byte{0x48, 0x00}, size)))},
		{"packed bucket counts in one histogram", seriesOf(msgField(4, msgField(13, repeatTo([]byte{0x00}, size))))},
		{"empty metadata", repeatTo([]byte{0x1a, 0x00}, size)},
	}
}

// TestDecodeAllocatesInProportionToItsInput decodes hostile shapes of every
// repeated field with the pusher's limits: whatever the shape, one decode
// allocates at most a few tens of times its input (before the bound, empty
// series cost about 100 times, empty histograms about 250 times).
func TestDecodeAllocatesInProportionToItsInput(t *testing.T) {
	const size = 1 << 20
	const k = 3 * DefaultMaxExpansion // the bound, plus append's growth
	for _, tc := range hostileShapes(size) {
		t.Run(tc.name, func(t *testing.T) {
			var d Decoder
			d.Limits = Limits{MaxExpansion: DefaultMaxExpansion} // the memory bound alone
			var wr prompb.WriteRequest
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			err := d.Decode(tc.b, &wr)
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d bytes allocated for %d bytes of input (%.1f×): %v", alloc, len(tc.b), float64(alloc)/float64(len(tc.b)), err)
			if alloc > uint64(k*len(tc.b)) {
				t.Errorf("decoding %d bytes allocated %d bytes, more than %d times the input", len(tc.b), alloc, k)
			}
		})
	}
}

// TestDecodeAcceptsRealRequestsUnderTheBound holds the memory bound to
// what real requests need.
func TestDecodeAcceptsRealRequestsUnderTheBound(t *testing.T) {
	t.Parallel()
	noObservations := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{}}
	for i := range 1000 {
		noObservations.Timeseries = append(noObservations.Timeseries, prompb.TimeSeries{
			Labels:     []prompb.Label{{Name: "__name__", Value: "h"}, {Name: "i", Value: string(rune('a' + i%26))}},
			Histograms: []prompb.Histogram{{Schema: 3, ZeroThreshold: 1e-128, Timestamp: 1_700_000_000_000}},
		})
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"a loadgen request of 1 series", loadgen.Shape{Series: 1, StartMs: 1_700_000_000_000, StepMs: 1}.Marshal("tenant-1", 0)},
		{"a loadgen request of 2000 series", loadgen.Shape{Series: 2000, StartMs: 1_700_000_000_000, StepMs: 1}.Marshal("tenant-1", 0)},
		{"histograms, exemplars and metadata", mustMarshal(t, richRequest())},
		{"native histograms without observations", mustMarshal(t, noObservations)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := Decoder{Limits: pusherLimits}
			var wr prompb.WriteRequest
			if err := d.Decode(tc.b, &wr); err != nil {
				t.Fatalf("Decode: %v", err)
			}
		})
	}
}

// remoteWrite2 is a remote-write 2.0 Request: symbols (4) and one series
// (5) of label refs (1, packed), a sample (2) and a help ref in metadata.
func remoteWrite2() []byte {
	return cat(
		msgField(4, []byte("")), msgField(4, []byte("__name__")), msgField(4, []byte("up")),
		msgField(5, msgField(1, []byte{1, 2}), msgField(2, doubleField(1, 1), varintField(2, 1_700_000_000_000))),
	)
}

func snappyRequest(t testing.TB) []byte {
	return snappy.Encode(nil, loadgen.Shape{Series: 20, StartMs: 1_700_000_000_000, StepMs: 1}.Marshal("tenant-1", 0))
}

// TestRefusedByPolicy holds ValidateWriteRequest (the consumer's check)
// and the Decoder (the pusher's) to the rules of policy.go.
func TestRefusedByPolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		b        []byte
		want     error // nil: accepted
		consumer bool  // ValidateWriteRequest refuses it too
	}{
		{"should refuse a series without labels", cat(seriesOf(), msgField(1, msgField(2, doubleField(1, 1)))), ErrSeriesWithoutLabels, true},
		{"should refuse empty series repeated", repeatTo([]byte{0x0a, 0x00}, 64), ErrSeriesWithoutLabels, true},
		{"should refuse a series whose only label field comes last and is absent", msgField(1, msgField(2), msgField(3)), ErrSeriesWithoutLabels, true},
		{"should accept a series with labels and no samples", seriesOf(), nil, false},
		{"should accept a series with only exemplars", seriesOf(msgField(3, doubleField(2, 1))), nil, false},
		{"should refuse a remote-write 2.0 request", remoteWrite2(), ErrRemoteWrite2, true},
		{"should refuse a remote-write 2.0 request with only symbols", msgField(4, []byte("a")), ErrRemoteWrite2, true},
		{"should accept an empty request", nil, nil, false},
		{"should refuse a snappy-compressed request", snappyRequest(t), ErrSnappy, true},
		{"should refuse more series than the limit", repeatTo(seriesOf(), 10*20_001+10), ErrOverLimit, false},
		{"should refuse more samples in a series than the limit", seriesOf(repeatTo(msgField(2, doubleField(1, 1)), 11*20_001)), ErrOverLimit, false},
		{"should refuse more histograms in a series than the limit", seriesOf(repeatTo(msgField(4, varintField(1, 1)), 4*20_001)), ErrOverLimit, false},
		{"should refuse more exemplars in a series than the limit", seriesOf(repeatTo(msgField(3, doubleField(2, 1)), 11*20_001)), ErrOverLimit, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := Decoder{Limits: pusherLimits}
			var wr prompb.WriteRequest
			if err := d.Decode(tc.b, &wr); !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
				t.Errorf("Decode = %v, want %v", err, tc.want)
			}
			err := ValidateWriteRequest(tc.b)
			switch {
			case tc.consumer && !errors.Is(err, tc.want):
				t.Errorf("ValidateWriteRequest = %v, want %v", err, tc.want)
			case !tc.consumer && err != nil:
				t.Errorf("ValidateWriteRequest = %v, want nil", err)
			}
		})
	}
}

// TestSnappyCheckIsBounded feeds values that claim a huge decoded length:
// the check must not allocate for the claim.
func TestSnappyCheckIsBounded(t *testing.T) {
	b := protowire.AppendVarint(nil, 1<<31)
	b = append(b, 0xff, 0xff, 0xff)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := ValidateWriteRequest(b)
	runtime.ReadMemStats(&after)
	if errors.Is(err, ErrSnappy) || err == nil {
		t.Errorf("ValidateWriteRequest = %v, want a wire-format error", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("checking %d bytes allocated %d", len(b), alloc)
	}
}
