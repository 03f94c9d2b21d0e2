package gateway

import (
	"bytes"
	"testing"

	"github.com/klauspost/compress/snappy"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// v2Raw is an uncompressed 2.0 request of labels, samples and metadata,
// as Prometheus writes one: what v2Decoder must take.
func v2Raw(t testing.TB) []byte {
	t.Helper()
	req := &writev2.Request{
		Symbols: []string{"", "__name__", "up", "job", "node", "help text", "seconds", "instance", "a:9100", "b:9100"},
		Timeseries: []writev2.TimeSeries{
			{LabelsRefs: []uint32{1, 2, 7, 8, 3, 4}, Samples: []writev2.Sample{{Value: 1, Timestamp: nowMs()}, {Value: 2, Timestamp: nowMs() + 1, StartTimestamp: 5}},
				Metadata: writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_GAUGE, HelpRef: 5, UnitRef: 6}},
			// A second series of the same family: its metadata is not repeated.
			{LabelsRefs: []uint32{1, 2, 7, 9, 3, 4}, Samples: []writev2.Sample{{Value: -1, Timestamp: -5}},
				Metadata: writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_COUNTER, HelpRef: 0}},
			{LabelsRefs: []uint32{3, 4}},
		},
	}
	b, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// slowV2 is the generated decoder and fromV2, marshalled.
func slowV2(raw []byte) ([]byte, bool) {
	var req writev2.Request
	if req.Unmarshal(raw) != nil {
		return nil, false
	}
	out, err := fromV2(&req, len(req.Timeseries))
	if err != nil {
		return nil, false
	}
	b, err := out.Marshal()
	return b, err == nil
}

// fastDecode is how the gateway calls the fast decoder: after v2Cost
// counted the request and found it within the bound and for it.
func fastDecode(d *v2Decoder, raw []byte, out *prompb.WriteRequest) bool {
	c, _, err := v2Cost(raw, 1<<30, nil)
	return err == nil && !c.slow && d.decode(raw, out, c)
}

func TestTheV2DecoderTakesWhatPrometheusSendsAndConvertsItAsFromV2(t *testing.T) {
	t.Parallel()
	raw := v2Raw(t)
	d := new(v2Decoder)
	for range 2 { // the second time on the arrays of the first
		var out prompb.WriteRequest
		if !fastDecode(d, raw, &out) {
			t.Fatal("declined a request of labels, samples and metadata")
		}
		got, err := out.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		want, _ := slowV2(raw)
		if !bytes.Equal(got, want) {
			t.Fatalf("converted to %x, fromV2 to %x", got, want)
		}
	}
	if !fastDecode(d, raw, new(prompb.WriteRequest)) || len(d.metadata) != 1 {
		t.Errorf("%d metadata entries, want the first of the family only", len(d.metadata))
	}
}

func TestTheV2DecoderDeclinesWhatItDoesNotKnow(t *testing.T) {
	t.Parallel()
	withHistogram, _ := snappy.Decode(nil, v2Body(t))
	badRef := &writev2.Request{Symbols: []string{"", "__name__"}, Timeseries: []writev2.TimeSeries{{LabelsRefs: []uint32{1, 9}}}}
	oddRefs := &writev2.Request{Symbols: []string{"", "__name__"}, Timeseries: []writev2.TimeSeries{{LabelsRefs: []uint32{1}}}}
	badHelp := &writev2.Request{Symbols: []string{"", "__name__", "up"}, Timeseries: []writev2.TimeSeries{{LabelsRefs: []uint32{1, 2}, Metadata: writev2.Metadata{HelpRef: 7}}}}
	for name, raw := range map[string][]byte{
		"histograms and exemplars":       withHistogram,
		"a label reference out of range": mustMarshal(t, badRef),
		"an odd number of label refs":    mustMarshal(t, oddRefs),
		"a help reference out of range":  mustMarshal(t, badHelp),
		"an unknown request field":       append(mustMarshal(t, badRef), 6<<3, 1),
		"a truncated series":             {5<<3 | 2, 10, 1},
		"unpacked label references":      {5<<3 | 2, 2, 1 << 3, 0},
		// The generated decoder truncates it to 0, a reference in range.
		"a label reference of 2^32":         {4<<3 | 2, 0, 5<<3 | 2, 8, 1<<3 | 2, 6, 0x80, 0x80, 0x80, 0x80, 0x10, 0},
		"a timestamp of an overflowing int": append(append([]byte{5<<3 | 2, 13, 2<<3 | 2, 11, 2 << 3}, bytes.Repeat([]byte{0xff}, 9)...), 0x7f),
	} {
		if fastDecode(new(v2Decoder), raw, new(prompb.WriteRequest)) {
			t.Errorf("%s: taken", name)
		}
	}
}

func mustMarshal(t testing.TB, req *writev2.Request) []byte {
	t.Helper()
	b, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzDecodeV2 holds v2Decoder to the generated decoder and fromV2:
// whatever it takes, they take too and convert to the same request.
func FuzzDecodeV2(f *testing.F) {
	f.Add(v2Raw(f))
	withHistogram, _ := snappy.Decode(nil, v2Body(f))
	f.Add(withHistogram)
	f.Add([]byte{4<<3 | 2, 0, 5<<3 | 2, 2, 1<<3 | 2, 0})
	d := new(v2Decoder)
	f.Fuzz(func(t *testing.T, raw []byte) {
		var out prompb.WriteRequest
		if !fastDecode(d, raw, &out) {
			return
		}
		want, ok := slowV2(raw)
		if !ok {
			t.Fatal("taken, but refused by the generated decoder or fromV2")
		}
		got, err := out.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("converted to %x, fromV2 to %x", got, want)
		}
	})
}
