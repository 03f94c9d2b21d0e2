package wire

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/proto/prompb"
)

func TestValidateWriteRequest(t *testing.T) {
	full, err := (&prompb.WriteRequest{
		Timeseries: []prompb.TimeSeries{{
			Labels:     []prompb.Label{{Name: "__name__", Value: "h"}},
			Samples:    []prompb.Sample{{Value: 1.5, Timestamp: 1}},
			Exemplars:  []prompb.Exemplar{{Labels: []prompb.Label{{Name: "trace_id", Value: "x"}}, Value: 1, Timestamp: 1}},
			Histograms: []prompb.Histogram{{Count: &prompb.Histogram_CountInt{CountInt: 3}, PositiveSpans: []prompb.BucketSpan{{Length: 1}}, PositiveDeltas: []int64{3}, Timestamp: 1}},
		}},
		Metadata: []prompb.MetricMetadata{{Type: prompb.MetricMetadata_METRIC_TYPE_GAUGE, MetricFamilyName: "h", Help: "help"}},
	}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	series := func(inner []byte) []byte {
		b := protowire.AppendTag(nil, 1, protowire.BytesType)
		return protowire.AppendBytes(b, inner)
	}
	labelWithVarintName := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5)
	sampleWithVarintValue := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5)
	for _, tc := range []struct {
		name  string
		value []byte
		ok    bool
	}{
		{"should accept a demo request", loadgen.Shape{Series: 5, StepMs: 1}.Marshal("t", 1), true},
		{"should accept histograms, exemplars and metadata", full, true},
		{"should accept an empty request", nil, true},
		{"should refuse a truncated request", full[:len(full)-3], false},
		{"should refuse a time series that is a varint", protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1), false},
		{"should refuse a label whose name is a varint", series(protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), labelWithVarintName)), false},
		{"should refuse a sample whose value is a varint", series(protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), sampleWithVarintValue)), false},
		{"should refuse text", []byte("hello, world"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateWriteRequest(tc.value)
			if (err == nil) != tc.ok {
				t.Fatalf("ValidateWriteRequest = %v, want ok=%v", err, tc.ok)
			}
			var wr prompb.WriteRequest
			if decodes := wr.Unmarshal(tc.value) == nil; decodes != tc.ok {
				t.Fatalf("the generated decoder says ok=%v: the case is wrong", decodes)
			}
		})
	}
}

// FuzzValidateWriteRequest checks the specialised walk against the generic
// one it replaced (refWalkWriteRequest, kept below as the specification):
// the same values are refused with the same words, and nothing the
// generated decoder accepts is refused by ValidateWriteRequest.
func FuzzValidateWriteRequest(f *testing.F) {
	for _, seed := range validateSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		got, want := walkWriteRequest(value), refWalkWriteRequest(value)
		if (got == nil) != (want == nil) || (got != nil && got.Error() != want.Error()) {
			t.Fatalf("walkWriteRequest = %v, the reference walk says %v", got, want)
		}
		var wr prompb.WriteRequest
		if err := ValidateWriteRequest(value); err != nil && !errors.Is(err, ErrRefused) && wr.Unmarshal(value) == nil {
			t.Fatalf("refused a value the generated decoder accepts: %v", err)
		}
	})
}

// validateSeeds are values that reach every branch of the walk: a request
// with every kind of field, each of its prefixes (truncated fields at every
// depth), and requests whose fields have long lengths, long or
// non-minimal tags, unknown fields of every wire type, groups and wrong
// wire types.
func validateSeeds(tb testing.TB) [][]byte {
	full, err := (&prompb.WriteRequest{
		Timeseries: []prompb.TimeSeries{{
			Labels:     []prompb.Label{{Name: "__name__", Value: "h"}, {Name: "long", Value: strings.Repeat("v", 200)}},
			Samples:    []prompb.Sample{{Value: 1.5, Timestamp: 1_700_000_000_000}, {Value: -1, Timestamp: -1}},
			Exemplars:  []prompb.Exemplar{{Labels: []prompb.Label{{Name: "trace_id", Value: "x"}}, Value: 1, Timestamp: 1}},
			Histograms: []prompb.Histogram{{Count: &prompb.Histogram_CountInt{CountInt: 3}, PositiveSpans: []prompb.BucketSpan{{Length: 1}}, PositiveDeltas: []int64{3}, Timestamp: 1}},
		}},
		Metadata: []prompb.MetricMetadata{{Type: prompb.MetricMetadata_METRIC_TYPE_GAUGE, MetricFamilyName: "h", Help: "help"}},
	}).Marshal()
	if err != nil {
		tb.Fatal(err)
	}
	msg := func(num protowire.Number, inner ...[]byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), bytes.Join(inner, nil))
	}
	varint := func(num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
	}
	unknown := bytes.Join([][]byte{
		varint(9, 1<<63),
		protowire.AppendFixed32(protowire.AppendTag(nil, 10, protowire.Fixed32Type), 1),
		protowire.AppendFixed64(protowire.AppendTag(nil, 11, protowire.Fixed64Type), 1),
		msg(12, []byte("x")),
		{0x9b, 0x01, 0x08, 0x01, 0x9c, 0x01}, // group 19 holding a varint
		{0x9b, 0x01, 0xa4, 0x01},             // group 19 ended as group 20
		{0x8a, 0x00, 0x00},                   // field 1, bytes, as a non-minimal two-byte tag
	}, nil)
	seeds := [][]byte{
		full,
		unknown,
		msg(1, msg(1, unknown), msg(2, unknown), msg(3, unknown), msg(4, unknown), unknown),
		msg(1, msg(1, varint(1, 5))),
		msg(1, msg(2, varint(1, 5))),
		msg(1, msg(2, msg(2, nil))),
		msg(1, varint(1, 1)),
		varint(3, 1),
		{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f},
		{0x0a, 0x80},
		{0x0a, 0x80, 0x00},             // a series of zero bytes, its length in two
		{0x0a, 0x81, 0x00, 0x00},       // a series of one byte, its length in two
		{0x0a, 0x80, 0x80, 0x01, 0x00}, // a truncated series, its length in three
		{0x00},
		{0x0f},
		{0x0c},
		{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02},
	}
	for i := range full {
		seeds = append(seeds, full[:i])
	}
	// Values refused by policy (policy.go).
	seeds = append(seeds, remoteWrite2(), snappyRequest(tb), bytes.Repeat([]byte{0x0a, 0x00}, 16))
	return seeds
}

// TestValidateSeeds runs the differential check of FuzzValidateWriteRequest
// on the seeds with their errors shown, so that a plain `go test` proves
// them without the fuzzing engine.
func TestValidateSeeds(t *testing.T) {
	refused := 0
	for _, seed := range validateSeeds(t) {
		got, want := walkWriteRequest(seed), refWalkWriteRequest(seed)
		if (got == nil) != (want == nil) || (got != nil && got.Error() != want.Error()) {
			t.Errorf("%x: walkWriteRequest = %v, the reference walk says %v", seed, got, want)
		}
		if got != nil {
			refused++
		}
	}
	if refused == 0 {
		t.Fatal("no seed is refused: the seeds do not exercise the errors")
	}
}

// refWalkWriteRequest is the generic, closure-driven walk that
// walkWriteRequest replaced, kept as its specification: it is short enough
// to be read as the contract, and the fuzz test holds the fast walk to it.
func refWalkWriteRequest(b []byte) error {
	return refWalk(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch num {
		case 1:
			return refNested("timeseries", typ, v, refTimeSeries)
		case 3:
			return refNested("metadata", typ, v, refAny)
		}
		return nil
	})
}

func refTimeSeries(b []byte) error {
	return refWalk(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch num {
		case 1:
			return refNested("label", typ, v, refLabel)
		case 2:
			return refNested("sample", typ, v, refSample)
		case 3:
			return refNested("exemplar", typ, v, refAny)
		case 4:
			return refNested("histogram", typ, v, refAny)
		}
		return nil
	})
}

func refLabel(b []byte) error {
	return refWalk(b, func(num protowire.Number, typ protowire.Type, _ []byte) error {
		if (num == 1 || num == 2) && typ != protowire.BytesType {
			return fmt.Errorf("label field %d has wire type %d, want bytes", num, typ)
		}
		return nil
	})
}

func refSample(b []byte) error {
	return refWalk(b, func(num protowire.Number, typ protowire.Type, _ []byte) error {
		switch {
		case num == 1 && typ != protowire.Fixed64Type:
			return fmt.Errorf("sample value has wire type %d, want fixed64", typ)
		case num == 2 && typ != protowire.VarintType:
			return fmt.Errorf("sample timestamp has wire type %d, want varint", typ)
		}
		return nil
	})
}

func refAny(b []byte) error {
	return refWalk(b, func(protowire.Number, protowire.Type, []byte) error { return nil })
}

func refNested(what string, typ protowire.Type, v []byte, validate func([]byte) error) error {
	if typ != protowire.BytesType {
		return fmt.Errorf("%s has wire type %d, want an embedded message", what, typ)
	}
	if err := validate(v); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// refWalk calls fn for every field of b with the field's value: the content
// of a bytes field, the encoded value otherwise.
func refWalk(b []byte, fn func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(m))
		}
		v := b[n : n+m]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v)
		}
		if err := fn(num, typ, v); err != nil {
			return err
		}
		b = b[n+m:]
	}
	return nil
}
