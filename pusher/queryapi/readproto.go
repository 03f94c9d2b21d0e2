package queryapi

// The remote-read messages are Prometheus' own generated types
// (github.com/prometheus/prometheus/prompb), which Ferry can link since
// its copy of the remote-write messages registers under its own protobuf
// package (ferry.prompb.v1) instead of "prometheus". This file converts
// between them and the storage's types; remoteread.go serves them.

import (
	"errors"
	"fmt"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"google.golang.org/protobuf/encoding/protowire"
)

// readRequest is a decoded prometheus.ReadRequest.
type readRequest struct {
	queries  []readQuery
	accepted []prompb.ReadRequest_ResponseType
}

// readQuery is a prometheus.Query in the storage's terms.
type readQuery struct {
	start, end int64
	matchers   []*labels.Matcher
	hints      *storage.SelectHints
}

// Bounds on the elements of one read request, counted by
// checkReadRequest before the request is decoded. Decoding allocates a
// struct per element, however small its encoding: before these bounds, a
// request of 0.8 MB compressed (16 MiB decoded, Prometheus' size limit
// allowed 32) holding 8 million empty matchers allocated 1.4 GiB. Within
// them, decoding a read request allocates a few MiB at most.
const (
	// maxReadQueries bounds the queries of a request.
	maxReadQueries = 1_000
	// maxReadMatchers bounds the matchers of all its queries together,
	// far beyond the selectors of any PromQL expression.
	maxReadMatchers = 10_000
)

// checkReadRequest counts the queries and matchers of an encoded
// ReadRequest and the bytes of its matchers, which together may hold no
// more than one PromQL expression: -query.max-expression-bytes. It decodes
// nothing else; a malformed request is left to the decoder to report.
func checkReadRequest(b []byte, limits exprLimits) error {
	queries, matchers, matcherBytes := 0, 0, 0
	err := eachField(b, func(num protowire.Number, q []byte) error {
		if num != 1 {
			return nil
		}
		if queries++; queries > maxReadQueries {
			return fmt.Errorf("more than %d queries", maxReadQueries)
		}
		return eachField(q, func(num protowire.Number, m []byte) error {
			if num != 3 {
				return nil
			}
			if matchers++; matchers > maxReadMatchers {
				return fmt.Errorf("more than %d matchers", maxReadMatchers)
			}
			if matcherBytes += len(m); matcherBytes > limits.maxBytes {
				return fmt.Errorf("matchers of more than -query.max-expression-bytes=%d bytes", limits.maxBytes)
			}
			return nil
		})
	})
	if errors.Is(err, errMalformed) {
		return nil
	}
	return err
}

// errMalformed ends eachField at bytes that are not protobuf.
var errMalformed = errors.New("malformed")

// eachField calls fn with the number and contents of every
// length-delimited field of the message b, skipping the others.
func eachField(b []byte, fn func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return errMalformed
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return errMalformed
		}
		b = b[n:]
		if err := fn(num, v); err != nil {
			return err
		}
	}
	return nil
}

// decodeReadRequest decodes a prometheus.ReadRequest. Its elements are
// counted first (checkReadRequest), and every matcher is held to limits
// before its regular expression is compiled.
func decodeReadRequest(b []byte, limits exprLimits) (*readRequest, error) {
	if err := checkReadRequest(b, limits); err != nil {
		return nil, fmt.Errorf("read request over a bound: %w", err)
	}
	var pb prompb.ReadRequest
	if err := pb.Unmarshal(b); err != nil {
		return nil, err
	}
	req := &readRequest{accepted: pb.AcceptedResponseTypes, queries: make([]readQuery, 0, len(pb.Queries))}
	for i, q := range pb.Queries {
		rq, err := fromQuery(q, limits)
		if err != nil {
			return nil, fmt.Errorf("query %d: %w", i, err)
		}
		req.queries = append(req.queries, rq)
	}
	return req, nil
}

func fromQuery(q *prompb.Query, limits exprLimits) (readQuery, error) {
	rq := readQuery{start: q.StartTimestampMs, end: q.EndTimestampMs, matchers: make([]*labels.Matcher, 0, len(q.Matchers))}
	for _, m := range q.Matchers {
		lm, err := fromMatcher(m, limits)
		if err != nil {
			return readQuery{}, err
		}
		rq.matchers = append(rq.matchers, lm)
	}
	if h := q.Hints; h != nil {
		rq.hints = &storage.SelectHints{
			Start: h.StartMs, End: h.EndMs, Step: h.StepMs, Func: h.Func,
			Grouping: h.Grouping, By: h.By, Range: h.RangeMs,
		}
	}
	return rq, nil
}

// fromMatcher converts a matcher, whose type values (EQ, NEQ, RE, NRE) are
// those of labels.MatchType.
func fromMatcher(m *prompb.LabelMatcher, limits exprLimits) (*labels.Matcher, error) {
	if m.Type > prompb.LabelMatcher_NRE || m.Type < prompb.LabelMatcher_EQ {
		return nil, fmt.Errorf("matcher %q: unknown type %d", m.Name, m.Type)
	}
	typ := labels.MatchType(m.Type)
	if err := limits.checkMatcher(typ, m.Name, m.Value); err != nil {
		return nil, err
	}
	lm, err := labels.NewMatcher(typ, m.Name, m.Value)
	if err != nil {
		return nil, fmt.Errorf("matcher %q: %w", m.Name, err)
	}
	return lm, nil
}

// negotiate picks the first accepted response type this server knows;
// none means SAMPLES, for clients older than the streamed type.
func negotiate(accepted []prompb.ReadRequest_ResponseType) (prompb.ReadRequest_ResponseType, error) {
	if len(accepted) == 0 {
		return prompb.ReadRequest_SAMPLES, nil
	}
	for _, t := range accepted {
		if t == prompb.ReadRequest_SAMPLES || t == prompb.ReadRequest_STREAMED_XOR_CHUNKS {
			return t, nil
		}
	}
	return 0, fmt.Errorf("server does not support any of the requested response types %v; supported: SAMPLES (0), STREAMED_XOR_CHUNKS (1)", accepted)
}

// appendTimeSeries appends the series, with every sample of it, as field
// 1 of a QueryResult. Each series is encoded as soon as it is read, so a
// response holds encoded bytes, never a struct per sample of every series.
func appendTimeSeries(b []byte, ls labels.Labels, it chunkenc.Iterator) ([]byte, error) {
	ts := prompb.TimeSeries{Labels: prompb.FromLabels(ls, nil)}
	for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
		switch vt {
		case chunkenc.ValFloat:
			t, v := it.At()
			ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: t, Value: v})
		case chunkenc.ValHistogram:
			t, h := it.AtHistogram(nil)
			ts.Histograms = append(ts.Histograms, prompb.FromIntHistogram(t, h))
		case chunkenc.ValFloatHistogram:
			t, h := it.AtFloatHistogram(nil)
			ts.Histograms = append(ts.Histograms, prompb.FromFloatHistogram(t, h))
		default:
			return b, fmt.Errorf("unknown sample type %s", vt)
		}
	}
	if err := it.Err(); err != nil {
		return b, err
	}
	return appendField(b, 1, &ts)
}

// chunkedFrame encodes one frame of a streamed response: part of a
// series' chunks, for query index.
func chunkedFrame(ls labels.Labels, cs []prompb.Chunk, index int64) ([]byte, error) {
	resp := prompb.ChunkedReadResponse{
		ChunkedSeries: []*prompb.ChunkedSeries{{Labels: prompb.FromLabels(ls, nil), Chunks: cs}},
		QueryIndex:    index,
	}
	return resp.Marshal()
}

// fromChunk converts a chunk of the store; its data is shared, not
// copied.
func fromChunk(c chunks.Meta) prompb.Chunk {
	return prompb.Chunk{
		MinTimeMs: c.MinTime, MaxTimeMs: c.MaxTime,
		Type: prompb.Chunk_Encoding(c.Chunk.Encoding()), Data: c.Chunk.Bytes(),
	}
}

// marshaler is a generated message that encodes into a buffer of its
// size.
type marshaler interface {
	Size() int
	MarshalToSizedBuffer([]byte) (int, error)
}

// appendField appends m as the length-delimited field num, encoded in
// place at the end of b.
func appendField(b []byte, num protowire.Number, m marshaler) ([]byte, error) {
	size := m.Size()
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size)) //nolint:gosec // a size is never negative
	start := len(b)
	b = append(b, make([]byte, size)...)
	if _, err := m.MarshalToSizedBuffer(b[start:]); err != nil {
		return b[:start], fmt.Errorf("marshal: %w", err)
	}
	return b, nil
}
