package queryapi

// The remote-read messages (prometheus/prompb's remote.proto and
// types.proto) are decoded and encoded here with protowire rather than
// through Prometheus' generated prompb package: that package and Ferry's
// own gogo-generated proto/prompb both register the protobuf package
// "prometheus" with gogo's global registry, which panics on the second
// registration of an enum, so the two cannot be linked into one binary.
// Only the few messages of the read path are needed; field numbers follow
// Prometheus' remote.proto.

import (
	"fmt"
	"math"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// Response types of ReadRequest.accepted_response_types.
const (
	responseSamples           = 0
	responseStreamedXORChunks = 1
)

// readRequest is a decoded prometheus.ReadRequest.
type readRequest struct {
	queries  []readQuery
	accepted []uint64
}

// readQuery is a decoded prometheus.Query.
type readQuery struct {
	start, end int64
	matchers   []*labels.Matcher
	hints      *storage.SelectHints
}

// field is one decoded field: v for varint and fixed types, bs for
// length-delimited ones.
type field struct {
	num protowire.Number
	typ protowire.Type
	v   uint64
	bs  []byte
}

// walk calls fn for every field of the message b, in order.
func walk(b []byte, fn func(f field) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		f := field{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			f.v, n = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			f.v, n = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var x uint32
			x, n = protowire.ConsumeFixed32(b)
			f.v = uint64(x)
		case protowire.BytesType:
			f.bs, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

// want checks a known field's wire type, so that a field of the wrong
// type is an error rather than silently read as zero.
func (f field) want(typ protowire.Type) error {
	if f.typ != typ {
		return fmt.Errorf("field %d has wire type %d, want %d", f.num, f.typ, typ)
	}
	return nil
}

// decodeReadRequest decodes a prometheus.ReadRequest.
func decodeReadRequest(b []byte, limits exprLimits) (*readRequest, error) {
	req := &readRequest{}
	err := walk(b, func(f field) error {
		switch f.num {
		case 1:
			if err := f.want(protowire.BytesType); err != nil {
				return err
			}
			q, err := decodeQuery(f.bs, limits)
			if err != nil {
				return fmt.Errorf("query %d: %w", len(req.queries), err)
			}
			req.queries = append(req.queries, q)
		case 2:
			return decodeEnums(f, &req.accepted)
		}
		return nil
	})
	return req, err
}

// decodeEnums reads a repeated enum, packed or not.
func decodeEnums(f field, out *[]uint64) error {
	if f.typ == protowire.VarintType {
		*out = append(*out, f.v)
		return nil
	}
	if err := f.want(protowire.BytesType); err != nil {
		return err
	}
	for b := f.bs; len(b) > 0; {
		v, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		*out = append(*out, v)
		b = b[n:]
	}
	return nil
}

func decodeQuery(b []byte, limits exprLimits) (readQuery, error) {
	var q readQuery
	err := walk(b, func(f field) error {
		switch f.num {
		case 1, 2:
			if err := f.want(protowire.VarintType); err != nil {
				return err
			}
			if f.num == 1 {
				q.start = wireInt64(f.v)
			} else {
				q.end = wireInt64(f.v)
			}
		case 3:
			if err := f.want(protowire.BytesType); err != nil {
				return err
			}
			m, err := decodeMatcher(f.bs, limits)
			if err != nil {
				return err
			}
			q.matchers = append(q.matchers, m)
		case 4:
			if err := f.want(protowire.BytesType); err != nil {
				return err
			}
			h, err := decodeHints(f.bs)
			if err != nil {
				return fmt.Errorf("hints: %w", err)
			}
			q.hints = h
		}
		return nil
	})
	return q, err
}

// decodeMatcher decodes a prometheus.LabelMatcher, whose type values
// (EQ, NEQ, RE, NRE) are those of labels.MatchType.
func decodeMatcher(b []byte, limits exprLimits) (*labels.Matcher, error) {
	var typ uint64
	var name, value string
	err := walk(b, func(f field) error {
		switch f.num {
		case 1:
			typ = f.v
			return f.want(protowire.VarintType)
		case 2:
			name = string(f.bs)
			return f.want(protowire.BytesType)
		case 3:
			value = string(f.bs)
			return f.want(protowire.BytesType)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("matcher: %w", err)
	}
	if typ > uint64(labels.MatchNotRegexp) {
		return nil, fmt.Errorf("matcher %q: unknown type %d", name, typ)
	}
	if err := limits.checkMatcher(labels.MatchType(typ), name, value); err != nil {
		return nil, err
	}
	m, err := labels.NewMatcher(labels.MatchType(typ), name, value)
	if err != nil {
		return nil, fmt.Errorf("matcher %q: %w", name, err)
	}
	return m, nil
}

func decodeHints(b []byte) (*storage.SelectHints, error) {
	h := &storage.SelectHints{}
	err := walk(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			err = f.want(protowire.VarintType)
			h.Step = wireInt64(f.v)
		case 3:
			err = f.want(protowire.VarintType)
			h.Start = wireInt64(f.v)
		case 4:
			err = f.want(protowire.VarintType)
			h.End = wireInt64(f.v)
		case 7:
			err = f.want(protowire.VarintType)
			h.Range = wireInt64(f.v)
		case 2:
			err = f.want(protowire.BytesType)
			h.Func = string(f.bs)
		case 5:
			err = f.want(protowire.BytesType)
			h.Grouping = append(h.Grouping, string(f.bs))
		case 6:
			err = f.want(protowire.VarintType)
			h.By = f.v != 0
		}
		return err
	})
	return h, err
}

// negotiate picks the first accepted response type this server knows;
// none means SAMPLES, for clients older than the streamed type.
func negotiate(accepted []uint64) (uint64, error) {
	if len(accepted) == 0 {
		return responseSamples, nil
	}
	for _, t := range accepted {
		if t == responseSamples || t == responseStreamedXORChunks {
			return t, nil
		}
	}
	return 0, fmt.Errorf("server does not support any of the requested response types %v; supported: SAMPLES (0), STREAMED_XOR_CHUNKS (1)", accepted)
}

// appendMessage appends field num holding the message that body appends.
// The body is built in place after a maximal-length placeholder for its
// size, then moved back, so nested messages need no second buffer.
func appendMessage(b []byte, num protowire.Number, body func([]byte) []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	start := len(b)
	b = append(b, make([]byte, binaryMaxVarint)...)
	b = body(b)
	size := len(b) - start - binaryMaxVarint
	var lenBuf [binaryMaxVarint]byte
	sizeBytes := protowire.AppendVarint(lenBuf[:0], uint64(size)) //nolint:gosec // size is a length, never negative
	n := copy(b[start:], sizeBytes)
	copy(b[start+n:], b[start+binaryMaxVarint:])
	return b[:start+n+size]
}

const binaryMaxVarint = 10

// wireInt64 decodes a proto3 int64: a two's-complement varint.
func wireInt64(v uint64) int64 {
	return int64(v) //nolint:gosec // proto3 int64 wire encoding
}

// appendInt64 appends int64 field num as proto3 encodes it.
func appendInt64(b []byte, num protowire.Number, v int64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v)) //nolint:gosec // proto3 int64 wire encoding
}

// appendLabelsProto appends ls as repeated prometheus.Label field num.
func appendLabelsProto(b []byte, num protowire.Number, ls labels.Labels) []byte {
	ls.Range(func(l labels.Label) {
		b = appendMessage(b, num, func(b []byte) []byte {
			b = protowire.AppendTag(b, 1, protowire.BytesType)
			b = protowire.AppendString(b, l.Name)
			b = protowire.AppendTag(b, 2, protowire.BytesType)
			return protowire.AppendString(b, l.Value)
		})
	})
	return b
}

// appendSampleProto appends a prometheus.Sample as field 2 of TimeSeries.
func appendSampleProto(b []byte, t int64, v float64) []byte {
	return appendMessage(b, 2, func(b []byte) []byte {
		b = protowire.AppendTag(b, 1, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(v))
		return appendInt64(b, 2, t)
	})
}

// appendHistogramProto appends a native histogram as field 4 of
// TimeSeries, through Ferry's generated Histogram, whose fields are
// Prometheus' own.
func appendHistogramProto(b []byte, h prompb.Histogram) ([]byte, error) {
	data, err := h.Marshal()
	if err != nil {
		return nil, fmt.Errorf("marshal histogram: %w", err)
	}
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	return protowire.AppendBytes(b, data), nil
}

func spansProto(spans []histogram.Span) []prompb.BucketSpan {
	out := make([]prompb.BucketSpan, len(spans))
	for i, s := range spans {
		out[i] = prompb.BucketSpan{Offset: s.Offset, Length: s.Length}
	}
	return out
}

// histogramProto converts an integer histogram sample.
func histogramProto(t int64, h *histogram.Histogram) prompb.Histogram {
	return prompb.Histogram{
		Count:          &prompb.Histogram_CountInt{CountInt: h.Count},
		Sum:            h.Sum,
		Schema:         h.Schema,
		ZeroThreshold:  h.ZeroThreshold,
		ZeroCount:      &prompb.Histogram_ZeroCountInt{ZeroCountInt: h.ZeroCount},
		NegativeSpans:  spansProto(h.NegativeSpans),
		NegativeDeltas: h.NegativeBuckets,
		PositiveSpans:  spansProto(h.PositiveSpans),
		PositiveDeltas: h.PositiveBuckets,
		ResetHint:      prompb.Histogram_ResetHint(h.CounterResetHint),
		Timestamp:      t,
		CustomValues:   h.CustomValues,
	}
}

// floatHistogramProto converts a float histogram sample.
func floatHistogramProto(t int64, h *histogram.FloatHistogram) prompb.Histogram {
	return prompb.Histogram{
		Count:          &prompb.Histogram_CountFloat{CountFloat: h.Count},
		Sum:            h.Sum,
		Schema:         h.Schema,
		ZeroThreshold:  h.ZeroThreshold,
		ZeroCount:      &prompb.Histogram_ZeroCountFloat{ZeroCountFloat: h.ZeroCount},
		NegativeSpans:  spansProto(h.NegativeSpans),
		NegativeCounts: h.NegativeBuckets,
		PositiveSpans:  spansProto(h.PositiveSpans),
		PositiveCounts: h.PositiveBuckets,
		ResetHint:      prompb.Histogram_ResetHint(h.CounterResetHint),
		Timestamp:      t,
		CustomValues:   h.CustomValues,
	}
}
