package wire

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// Builders of wire-format messages, for inputs the generated marshaller
// cannot produce.

func field(num protowire.Number, typ protowire.Type, v ...[]byte) []byte {
	b := protowire.AppendTag(nil, num, typ)
	for _, x := range v {
		b = append(b, x...)
	}
	return b
}

func msgField(num protowire.Number, parts ...[]byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), bytes.Join(parts, nil))
}

func varintField(num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
}

func doubleField(num protowire.Number, v float64) []byte {
	return protowire.AppendFixed64(protowire.AppendTag(nil, num, protowire.Fixed64Type), math.Float64bits(v))
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// unknownFields has an unknown field of every wire type the generated
// decoder skips, a nested group included.
func unknownFields() []byte {
	return cat(
		varintField(100, 1<<40),
		field(101, protowire.Fixed64Type, protowire.AppendFixed64(nil, 7)),
		msgField(102, []byte("opaque")),
		field(103, protowire.Fixed32Type, protowire.AppendFixed32(nil, 7)),
		field(104, protowire.StartGroupType, varintField(1, 5), field(105, protowire.StartGroupType),
			field(105, protowire.EndGroupType), field(104, protowire.EndGroupType)),
	)
}

func labelMsg(name, value string, extra ...[]byte) []byte {
	return cat(msgField(1, []byte(name)), msgField(2, []byte(value)), cat(extra...))
}

// richRequest has every kind of content a WriteRequest carries.
func richRequest() *prompb.WriteRequest {
	req := loadgen.Shape{Series: 3, StartMs: 1_700_000_000_000, StepMs: 1000}.Request("tenant-1", 2)
	req.Timeseries[0].Exemplars = []prompb.Exemplar{
		{Labels: []prompb.Label{{Name: "trace_id", Value: "abc"}, {Name: "span_id", Value: "def"}}, Value: 1.5, Timestamp: 1_700_000_000_001},
		{Value: math.Inf(-1), Timestamp: -3},
	}
	req.Timeseries[1].Histograms = []prompb.Histogram{{
		Count: &prompb.Histogram_CountInt{CountInt: 5}, Sum: 2.5, Schema: 1, ZeroThreshold: 0.001,
		ZeroCount:     &prompb.Histogram_ZeroCountInt{ZeroCountInt: 1},
		PositiveSpans: []prompb.BucketSpan{{Offset: 0, Length: 2}}, PositiveDeltas: []int64{2, 0},
		Timestamp: 1_700_000_000_000,
	}, {
		Count: &prompb.Histogram_CountFloat{CountFloat: 2.5}, Sum: math.NaN(),
		NegativeSpans: []prompb.BucketSpan{{Offset: -1, Length: 1}}, NegativeCounts: []float64{2.5},
		CustomValues: []float64{1, 2}, ResetHint: prompb.Histogram_RESET_HINT_GAUGE, Timestamp: 1_700_000_001_000,
	}}
	req.Timeseries[2].Samples = append(req.Timeseries[2].Samples,
		prompb.Sample{Value: math.Copysign(0, -1), Timestamp: 1}, prompb.Sample{Value: math.NaN()})
	req.Metadata = []prompb.MetricMetadata{
		{Type: prompb.MetricMetadata_METRIC_TYPE_GAUGE, MetricFamilyName: "ferry_demo_value", Help: "A demo value.", Unit: "seconds"},
		{Type: prompb.MetricMetadata_METRIC_TYPE_HISTOGRAM, MetricFamilyName: "h"},
	}
	return req
}

func mustMarshal(t testing.TB, req *prompb.WriteRequest) []byte {
	t.Helper()
	b, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// dump renders a request for comparison: every field, floats by their
// bits (so NaN equals itself and -0 differs from 0), and nil slices like
// empty ones. Histograms are decoded by the generated code on both sides;
// their encoding and their float fields' bits stand for them.
func dump(wr *prompb.WriteRequest) string {
	var b strings.Builder
	labels := func(indent string, ls []prompb.Label) {
		for _, l := range ls {
			fmt.Fprintf(&b, "%slabel %q=%q\n", indent, l.Name, l.Value)
		}
	}
	for _, ts := range wr.Timeseries {
		b.WriteString("series\n")
		labels("  ", ts.Labels)
		for _, s := range ts.Samples {
			fmt.Fprintf(&b, "  sample %d %x\n", s.Timestamp, math.Float64bits(s.Value))
		}
		for _, e := range ts.Exemplars {
			fmt.Fprintf(&b, "  exemplar %d %x\n", e.Timestamp, math.Float64bits(e.Value))
			labels("    ", e.Labels)
		}
		for _, h := range ts.Histograms {
			enc, err := h.Marshal()
			fmt.Fprintf(&b, "  histogram %x %v sum=%x zt=%x\n", enc, err, math.Float64bits(h.Sum), math.Float64bits(h.ZeroThreshold))
		}
	}
	for _, md := range wr.Metadata {
		fmt.Fprintf(&b, "metadata %d %q %q %q\n", md.Type, md.MetricFamilyName, md.Help, md.Unit)
	}
	return b.String()
}

// checkDecode decodes b with the generated decoder and with d, and fails
// unless both reject it or both accept it with the same content.
func checkDecode(t *testing.T, d *Decoder, b []byte) {
	t.Helper()
	orig := bytes.Clone(b)
	var want prompb.WriteRequest
	wantErr := want.Unmarshal(bytes.Clone(b))
	var got prompb.WriteRequest
	gotErr := d.Decode(b, &got)
	if !bytes.Equal(b, orig) {
		t.Fatalf("decode modified its input")
	}
	if wantErr == nil && errors.Is(gotErr, ErrRefused) {
		return // refused by policy (policy.go), which the generated decoder knows nothing of
	}
	switch {
	case wantErr != nil && gotErr == nil:
		t.Fatalf("generated decoder rejects (%v), pooled decoder accepts:\n%s", wantErr, dump(&got))
	case wantErr == nil && gotErr != nil:
		t.Fatalf("generated decoder accepts, pooled decoder rejects: %v\n%s", gotErr, dump(&want))
	case wantErr == nil:
		if g, w := dump(&got), dump(&want); g != w {
			t.Fatalf("pooled decoder:\n%s\ngenerated decoder:\n%s", g, w)
		}
	}
}

func TestDecodeLikeTheGeneratedDecoder(t *testing.T) {
	tenTo32 := uint64(1)<<32 + 1 // read as field 1 by the generated decoder
	for _, tc := range []struct {
		name string
		b    []byte
		ok   bool
	}{
		{name: "should accept an empty request", b: nil, ok: true},
		{name: "should accept a loadgen request", b: loadgen.Shape{Series: 100, StartMs: 1, StepMs: 1}.Marshal("tenant-1", 0), ok: true},
		{name: "should accept histograms, exemplars and metadata", b: mustMarshal(t, richRequest()), ok: true},
		{name: "should skip unknown fields of every wire type in every message", ok: true, b: cat(
			unknownFields(),
			msgField(1,
				unknownFields(),
				msgField(1, labelMsg("__name__", "up", unknownFields())),
				msgField(2, doubleField(1, 1), unknownFields(), varintField(2, 5)),
				msgField(3, unknownFields(), msgField(1, labelMsg("a", "b", unknownFields())), doubleField(2, 3)),
			),
			msgField(3, varintField(1, 2), unknownFields(), msgField(2, []byte("up")), varintField(3, 9)),
			unknownFields(),
		)},
		{name: "should skip a group whose end names another field", ok: true, b: cat(
			field(7, protowire.StartGroupType), field(8, protowire.EndGroupType),
			msgField(1, msgField(1, labelMsg("a", "b"))),
		)},
		{name: "should keep the last of a repeated scalar", ok: true, b: msgField(1,
			msgField(1, labelMsg("a", "b"), msgField(1, []byte("c")), msgField(2, []byte("d"))),
			msgField(2, varintField(2, 1), varintField(2, 2), doubleField(1, 1), doubleField(1, 2)),
		)},
		{name: "should keep series and metadata in order when interleaved", ok: true, b: cat(
			msgField(1, msgField(1, labelMsg("n", "1"))),
			msgField(3, msgField(2, []byte("m1"))),
			msgField(1, msgField(2, varintField(2, 1)), msgField(1, labelMsg("n", "2")), msgField(3), msgField(1, labelMsg("o", "3"))),
			msgField(3, msgField(2, []byte("m2"))),
		)},
		{name: "should accept empty messages and strings", ok: true, b: cat(
			msgField(1), msgField(1, msgField(1), msgField(2), msgField(3, msgField(1))), msgField(3),
		)},
		{name: "should read a label without a value field", ok: true, b: msgField(1, msgField(1, msgField(1, []byte("a"))))},
		{name: "should read a label whose value comes before its name", ok: true,
			b: msgField(1, msgField(1, msgField(2, []byte("b")), msgField(1, []byte("a"))))},
		{name: "should read a label with a name and a value of 200 bytes", ok: true,
			b: msgField(1, msgField(1, labelMsg(strings.Repeat("n", 200), strings.Repeat("v", 200))))},
		{name: "should read a label value whose length takes two bytes, the first equal to the bytes after it", ok: true,
			// 0x85 0x00 is a length of 5 written in two bytes; 133 (0x85)
			// bytes follow the 0x85 in all: the value and an unknown
			// field.
			b: msgField(1, msgField(1, msgField(1, []byte("a")), []byte{0x12, 0x85, 0x00}, []byte("hello"),
				msgField(3, bytes.Repeat([]byte{'x'}, 125))))},
		{name: "should read a label name whose length takes two bytes, the first equal to the bytes after it", ok: true,
			// 0x83 0x00 is a length of 3 written in two bytes; 131 (0x83)
			// bytes follow the 0x83 in all: the name and a value.
			b: msgField(1, msgField(1, []byte{0x0a, 0x83, 0x00}, []byte("abc"), msgField(2, bytes.Repeat([]byte{'v'}, 125))))},
		{name: "should reject a label whose name is followed by a lone byte", b: msgField(1, msgField(1, msgField(1, []byte("a")), []byte{0x08}))},
		{name: "should keep the last value of a sample whose value follows its timestamp again", ok: true,
			b: msgField(1, msgField(1, labelMsg("a", "b")), msgField(2, doubleField(1, 1), varintField(2, 5), doubleField(1, 2)))},
		{name: "should read a sample with an unknown field after its timestamp", ok: true,
			b: msgField(1, msgField(1, labelMsg("a", "b")), msgField(2, doubleField(1, 1), varintField(2, 5), msgField(9, []byte("x"))))},
		{name: "should read a sample whose timestamp is a ten-byte varint that overflows", ok: true,
			b: msgField(1, msgField(1, labelMsg("a", "b")), msgField(2, doubleField(1, 1), field(2, protowire.VarintType, bytes.Repeat([]byte{0xff}, 9), []byte{0x7f})))},
		{name: "should reject a sample whose timestamp is an eleven-byte varint", b: msgField(1, msgField(1, labelMsg("a", "b")),
			msgField(2, doubleField(1, 1), field(2, protowire.VarintType, bytes.Repeat([]byte{0xff}, 10), []byte{0x01})))},
		{name: "should reject a sample whose timestamp is cut short", b: msgField(1, msgField(1, labelMsg("a", "b")),
			msgField(2, doubleField(1, 1), field(2, protowire.VarintType, []byte{0xff, 0xff})))},
		{name: "should accept a ten-byte varint whose last byte overflows, as the generated decoder does", ok: true,
			b: msgField(1, msgField(2, field(2, protowire.VarintType, bytes.Repeat([]byte{0xff}, 9), []byte{0x7f})))},
		{name: "should skip a field number past 2^29", ok: true, b: varintField(1<<29+5, 1)},
		{name: "should read a field number truncated to 32 bits as a known field", ok: true,
			b: protowire.AppendBytes(protowire.AppendVarint(nil, tenTo32<<3|uint64(protowire.BytesType)), msgField(1, labelMsg("a", "b")))},
		{name: "should keep the low 32 bits of a metadata type", ok: true, b: msgField(3, varintField(1, 1<<33|3))},
		{name: "should reject a truncated tag", b: []byte{0x80}},
		{name: "should reject an eleven-byte varint", b: msgField(1, msgField(2, field(2, protowire.VarintType, bytes.Repeat([]byte{0xff}, 10), []byte{0x01})))},
		{name: "should reject a length past the end", b: []byte{0x0a, 0x05, 0x0a}},
		{name: "should reject a two-byte length past the end", b: cat([]byte{0x0a, 0x80, 0x01}, msgField(1, labelMsg("a", "b")))},
		{name: "should reject a two-byte length one or two bytes past the end",
			// 128 announced, 126 there: a label of 124 bytes.
			b: cat([]byte{0x0a, 0x80, 0x01}, msgField(1, labelMsg("a", strings.Repeat("v", 119))))},
		{name: "should read a series whose length is written in two bytes though it fits in one", ok: true,
			b: cat([]byte{0x0a, 0x88, 0x00}, msgField(1, labelMsg("a", "b")))},
		{name: "should reject a length of 2^63", b: cat(protowire.AppendTag(nil, 1, protowire.BytesType), protowire.AppendVarint(nil, 1<<63), []byte{0})},
		{name: "should reject a timeseries that is a varint", b: varintField(1, 1)},
		{name: "should reject a label name that is a varint", b: msgField(1, msgField(1, varintField(1, 1)))},
		{name: "should reject a sample value that is a varint", b: msgField(1, msgField(2, varintField(1, 1)))},
		{name: "should reject a truncated sample value", b: msgField(1, msgField(2, []byte{0x09, 1, 2, 3}))},
		{name: "should reject an exemplar timestamp that is fixed64", b: msgField(1, msgField(3, doubleField(3, 1)))},
		{name: "should reject a metadata name that is fixed32", b: msgField(3, field(2, protowire.Fixed32Type, []byte{1, 2, 3, 4}))},
		{name: "should reject an end group outside a group", b: field(5, protowire.EndGroupType)},
		{name: "should reject an end group inside a label", b: msgField(1, msgField(1, field(5, protowire.EndGroupType)))},
		{name: "should reject field number zero", b: []byte{0x02, 0x00}},
		{name: "should reject wire type 6 in an unknown field", b: []byte{0x7e}},
		{name: "should reject an unterminated group", b: cat(field(7, protowire.StartGroupType), varintField(1, 1))},
		{name: "should reject an unknown field running past the end", b: []byte{0x7a, 0x05, 0x01}},
		{name: "should reject an unknown fixed64 running past the end", b: []byte{0x79, 0x01}},
		{name: "should reject an undecodable histogram", b: msgField(1, msgField(4, varintField(3, 1)))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want prompb.WriteRequest
			if err := want.Unmarshal(bytes.Clone(tc.b)); (err == nil) != tc.ok {
				t.Fatalf("test case is wrong: the generated decoder says %v", err)
			}
			checkDecode(t, &Decoder{}, tc.b)
			// And again with memory left by another request.
			reused := &Decoder{}
			var scratch prompb.WriteRequest
			if err := reused.Decode(mustMarshal(t, richRequest()), &scratch); err != nil {
				t.Fatal(err)
			}
			checkDecode(t, reused, tc.b)
		})
	}
}

func TestDecoderReusesItsMemory(t *testing.T) {
	var d Decoder
	rich := mustMarshal(t, richRequest())
	small := loadgen.Shape{Series: 2, StartMs: 1, StepMs: 1}.Marshal("tenant-2", 5)
	for range 3 {
		checkDecode(t, &d, rich)
		checkDecode(t, &d, small)
	}
	// Validation (the pusher's Limits.Filter) moves and clears TimeSeries
	// in place, as here when it drops the first series; the next request
	// must not see any of it.
	var wr prompb.WriteRequest
	if err := d.Decode(rich, &wr); err != nil {
		t.Fatal(err)
	}
	wr.Timeseries[0].Labels[0].Value = "bad-name"
	kept := append(wr.Timeseries[:0], wr.Timeseries[1:]...)
	clear(wr.Timeseries[len(kept):])
	wr.Timeseries = kept
	checkDecode(t, &d, rich)

	// Appending to a series' slices must not overwrite the next series.
	if err := d.Decode(rich, &wr); err != nil {
		t.Fatal(err)
	}
	before := dump(&wr)
	_ = append(wr.Timeseries[0].Labels, prompb.Label{Name: "x"})
	_ = append(wr.Timeseries[0].Samples, prompb.Sample{Value: 9})
	_ = append(wr.Timeseries[0].Exemplars[0].Labels, prompb.Label{Name: "x"})
	_ = append(wr.Timeseries, prompb.TimeSeries{})
	if after := dump(&wr); after != before {
		t.Fatalf("an append changed the request:\n%s\nwant\n%s", after, before)
	}

	allocs := testing.AllocsPerRun(100, func() {
		if err := d.Decode(small, &wr); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("decoding into warm memory allocates %v times, want 0", allocs)
	}
}

func TestDecoderStringsPointIntoTheBuffer(t *testing.T) {
	var d Decoder
	b := loadgen.Shape{Series: 1, StartMs: 1, StepMs: 1}.Marshal("tenant-1", 0)
	var wr prompb.WriteRequest
	if err := d.Decode(b, &wr); err != nil {
		t.Fatal(err)
	}
	name := wr.Timeseries[0].Labels[0].Name
	i := bytes.Index(b, []byte(name))
	b[i] = 'X'
	if got := wr.Timeseries[0].Labels[0].Name; got[0] != 'X' {
		t.Fatalf("label name %q did not change with its buffer: it was copied", got)
	}
}

// fuzzSeeds are a loadgen request and a request with everything in it;
// the go tool adds the corpus in testdata/fuzz/FuzzDecodeWriteRequest (a
// copy of the pusher's FuzzFilter corpus, whose inputs are write requests
// too).
func fuzzSeeds(f *testing.F) [][]byte {
	return [][]byte{
		loadgen.Shape{Series: 10, StartMs: 1_700_000_000_000, StepMs: 1}.Marshal("tenant-1", 3),
		mustMarshal(f, richRequest()),
		// Shapes refused by policy: empty series, a remote-write 2.0
		// request, a snappy-compressed one, empty histograms.
		bytes.Repeat([]byte{0x0a, 0x00}, 64),
		remoteWrite2(),
		snappyRequest(f),
		repeatTo(seriesOf(repeatTo(msgField(4), 64)), 4096),
	}
}

// FuzzDecodeWriteRequest compares the pooled decoder with the generated
// one on arbitrary bytes, with fresh memory and with memory left by the
// previous input.
func FuzzDecodeWriteRequest(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
	}
	var reused Decoder
	limited := Decoder{Limits: pusherLimits}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode(t, &Decoder{}, b)
		checkDecode(t, &reused, b)
		checkDecode(t, &limited, b)
	})
}

// BenchmarkDecodeWriteRequest compares the stream's pooled decoding with
// the generated decoder that PushOne and the old stream path use.
func BenchmarkDecodeWriteRequest(b *testing.B) {
	for _, series := range []int{10, 100} {
		// The pusher's BenchmarkApply request.
		enc := loadgen.Shape{Series: series, StartMs: time.Now().Add(-time.Hour).UnixMilli(), StepMs: 1}.Request("tenant-1", 1)
		buf, err := enc.Marshal()
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("series=%d/decoder=pooled", series), func(b *testing.B) {
			var d Decoder
			var wr prompb.WriteRequest
			b.ReportAllocs()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				if err := d.Decode(buf, &wr); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("series=%d/decoder=generated", series), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				var wr prompb.WriteRequest
				if err := wr.Unmarshal(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
