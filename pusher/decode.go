package pusher

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// A Push stream decodes every write request into memory reused from
// earlier requests: the generated decoder allocates a string per label name
// and value and a slice per series, about a thousand objects for 100
// series, and that garbage was half of the pusher's CPU. Here label, exemplar
// and metadata strings point into the request's own encoded bytes, and every
// slice is a window on arrays kept from one request to the next.
//
// The decoder accepts exactly what (*prompb.WriteRequest).Unmarshal accepts
// and builds the same content, down to its quirks: ten-byte varints whose
// last byte overflows, field numbers truncated to 32 bits, groups skipped
// without matching their field numbers. FuzzDecodeWriteRequest compares
// the two.

// maxPooledBytes bounds the encoded size of a request whose memory goes
// back to the pool. A rare huge request would otherwise pin its buffer and
// arrays for as long as the stream keeps the pool busy.
const maxPooledBytes = 4 << 20

// pooledRequest is a request read from a Push stream, with the memory its
// decoded write request points into. It belongs to that one request until
// release, which the stream calls once the answer is sent: the backend may
// look at the request only during Push (see Backend).
type pooledRequest struct {
	req ferryv1.PushRequest
	buf []byte // the encoded write request; strings of req point into it
	dec decoder
}

var requestPool = sync.Pool{New: func() any { return new(pooledRequest) }}

// release returns the request's memory to the pool. Nothing may use the
// request, its strings or its slices afterwards.
func (p *pooledRequest) release() {
	if cap(p.buf) > maxPooledBytes {
		return
	}
	p.req = ferryv1.PushRequest{}
	requestPool.Put(p)
}

// decoder decodes WriteRequests into arrays it keeps between requests. A
// series' labels, samples, exemplars and histograms are consecutive windows
// of the arrays, with their capacity cut at their length so that a backend
// appending to one cannot overwrite the next. The windows, not the
// TimeSeries that hold them, are the decoder's: validation may move or
// clear TimeSeries, and the next decode starts from the arrays again.
type decoder struct {
	series     []prompb.TimeSeries
	labels     []prompb.Label
	samples    []prompb.Sample
	exemplars  []prompb.Exemplar
	exLabels   []prompb.Label // exemplar labels, apart so series labels stay consecutive
	histograms []prompb.Histogram
	metadata   []prompb.MetricMetadata
}

// decode sets wr to the WriteRequest encoded in b. The strings of wr point
// into b, which must not change while wr is in use; the slices of wr are
// valid until the next decode.
func (d *decoder) decode(b []byte, wr *prompb.WriteRequest) error {
	d.reset()
	*wr = prompb.WriteRequest{}
	if err := d.writeRequest(b); err != nil {
		return err
	}
	wr.Timeseries = window(d.series, 0)
	wr.Metadata = window(d.metadata, 0)
	return nil
}

// reset truncates the arrays. Histograms are cleared first: the generated
// decoder allocated their slices, which the pool should not keep alive.
func (d *decoder) reset() {
	clear(d.histograms)
	d.series = d.series[:0]
	d.labels = d.labels[:0]
	d.samples = d.samples[:0]
	d.exemplars = d.exemplars[:0]
	d.exLabels = d.exLabels[:0]
	d.histograms = d.histograms[:0]
	d.metadata = d.metadata[:0]
}

// window returns s[from:] with its capacity cut at its length, or nil when
// it is empty, as the generated decoder leaves a field it did not see.
func window[T any](s []T, from int) []T {
	if len(s) == from {
		return nil
	}
	return s[from:len(s):len(s)]
}

func (d *decoder) writeRequest(b []byte) error {
	for len(b) > 0 {
		num, typ, n, err := consumeTag(b, "WriteRequest")
		if err != nil {
			return err
		}
		switch num {
		case 1, 3:
			v, m, err := consumeMessage(b[n:], typ, "WriteRequest", num)
			if err != nil {
				return err
			}
			if num == 1 {
				err = d.timeSeries(v)
			} else {
				err = d.metricMetadata(v)
			}
			if err != nil {
				return err
			}
			n += m
		default:
			if n, err = skipField(b); err != nil {
				return err
			}
		}
		b = b[n:]
	}
	return nil
}

func (d *decoder) timeSeries(b []byte) error {
	labels, samples, exemplars, histograms := len(d.labels), len(d.samples), len(d.exemplars), len(d.histograms)
	for len(b) > 0 {
		num, typ, n, err := consumeTag(b, "TimeSeries")
		if err != nil {
			return err
		}
		switch num {
		case 1, 2, 3, 4:
			v, m, err := consumeMessage(b[n:], typ, "TimeSeries", num)
			if err != nil {
				return err
			}
			if err := d.timeSeriesField(num, v); err != nil {
				return err
			}
			n += m
		default:
			if n, err = skipField(b); err != nil {
				return err
			}
		}
		b = b[n:]
	}
	d.series = append(d.series, prompb.TimeSeries{
		Labels:     window(d.labels, labels),
		Samples:    window(d.samples, samples),
		Exemplars:  window(d.exemplars, exemplars),
		Histograms: window(d.histograms, histograms),
	})
	return nil
}

func (d *decoder) timeSeriesField(num int32, v []byte) error {
	switch num {
	case 1:
		var l prompb.Label
		if err := decodeLabel(v, &l); err != nil {
			return err
		}
		d.labels = append(d.labels, l)
	case 2:
		var s prompb.Sample
		if err := decodeSample(v, &s); err != nil {
			return err
		}
		d.samples = append(d.samples, s)
	case 3:
		var e prompb.Exemplar
		if err := d.exemplar(v, &e); err != nil {
			return err
		}
		d.exemplars = append(d.exemplars, e)
	case 4:
		// Histograms are rare: the generated decoder is good enough, and
		// its slices are its own.
		d.histograms = append(d.histograms, prompb.Histogram{})
		if err := d.histograms[len(d.histograms)-1].Unmarshal(v); err != nil {
			return fmt.Errorf("histogram: %w", err)
		}
	}
	return nil
}

func decodeLabel(b []byte, l *prompb.Label) error {
	for len(b) > 0 {
		num, typ, n, err := consumeTag(b, "Label")
		if err != nil {
			return err
		}
		switch num {
		case 1, 2:
			v, m, err := consumeMessage(b[n:], typ, "Label", num)
			if err != nil {
				return err
			}
			if num == 1 {
				l.Name = unsafeString(v)
			} else {
				l.Value = unsafeString(v)
			}
			n += m
		default:
			if n, err = skipField(b); err != nil {
				return err
			}
		}
		b = b[n:]
	}
	return nil
}

func decodeSample(b []byte, s *prompb.Sample) error {
	for len(b) > 0 {
		num, typ, n, err := consumeTag(b, "Sample")
		if err != nil {
			return err
		}
		var m int
		switch num {
		case 1:
			s.Value, m, err = consumeDouble(b[n:], typ, "Sample", num)
		case 2:
			s.Timestamp, m, err = consumeInt64(b[n:], typ, "Sample", num)
		default:
			n, err = skipField(b)
		}
		if err != nil {
			return err
		}
		b = b[n+m:]
	}
	return nil
}

func (d *decoder) exemplar(b []byte, e *prompb.Exemplar) error {
	labels := len(d.exLabels)
	for len(b) > 0 {
		num, typ, n, err := consumeTag(b, "Exemplar")
		if err != nil {
			return err
		}
		var m int
		switch num {
		case 1:
			var v []byte
			if v, m, err = consumeMessage(b[n:], typ, "Exemplar", num); err == nil {
				err = d.exemplarLabel(v)
			}
		case 2:
			e.Value, m, err = consumeDouble(b[n:], typ, "Exemplar", num)
		case 3:
			e.Timestamp, m, err = consumeInt64(b[n:], typ, "Exemplar", num)
		default:
			n, err = skipField(b)
		}
		if err != nil {
			return err
		}
		b = b[n+m:]
	}
	e.Labels = window(d.exLabels, labels)
	return nil
}

func (d *decoder) exemplarLabel(b []byte) error {
	var l prompb.Label
	if err := decodeLabel(b, &l); err != nil {
		return err
	}
	d.exLabels = append(d.exLabels, l)
	return nil
}

func (d *decoder) metricMetadata(b []byte) error {
	var md prompb.MetricMetadata
	for len(b) > 0 {
		num, typ, n, err := consumeTag(b, "MetricMetadata")
		if err != nil {
			return err
		}
		var m int
		switch num {
		case 1:
			var v uint64
			if v, m, err = consumeVarintField(b[n:], typ, "MetricMetadata", num); err == nil {
				// The generated decoder keeps the low 32 bits, as here.
				md.Type = prompb.MetricMetadata_MetricType(int32(v)) //nolint:gosec // proto3 enum wire encoding
			}
		case 2, 4, 5:
			var v []byte
			if v, m, err = consumeMessage(b[n:], typ, "MetricMetadata", num); err == nil {
				setMetadataString(&md, num, unsafeString(v))
			}
		default:
			n, err = skipField(b)
		}
		if err != nil {
			return err
		}
		b = b[n+m:]
	}
	d.metadata = append(d.metadata, md)
	return nil
}

// setMetadataString sets the string field num of md.
func setMetadataString(md *prompb.MetricMetadata, num int32, s string) {
	switch num {
	case 2:
		md.MetricFamilyName = s
	case 4:
		md.Help = s
	case 5:
		md.Unit = s
	}
}

// unsafeString returns a string sharing b's memory: the caller keeps b
// unchanged for as long as the string is used.
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b)) //nolint:gosec // the pooled request owns b until release; see pooledRequest
}

// Errors of the wire format, with the generated decoder's texts.
var (
	errIntOverflow   = errors.New("proto: integer overflow")
	errInvalidLength = errors.New("proto: negative length found during unmarshaling")
	errEndOfGroup    = errors.New("proto: unexpected end of group")
)

// maxVarintLen is the longest varint the generated decoder reads.
const maxVarintLen = 10

// consumeVarint reads a varint as the generated decoder does: at most ten
// bytes, and bits past the 64th are dropped rather than refused, which is
// more lenient than protowire.ConsumeVarint.
func consumeVarint(b []byte) (uint64, int, error) {
	var v uint64
	for i := 0; i < maxVarintLen && i < len(b); i++ {
		c := b[i]
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1, nil
		}
	}
	if len(b) < maxVarintLen {
		return 0, 0, io.ErrUnexpectedEOF
	}
	return 0, 0, errIntOverflow
}

// consumeTag reads a field's tag. Like the generated decoder it keeps the
// low 32 bits of the field number, so a number past 2^29 (invalid for
// protowire) is still skipped as unknown, or even read as a known field.
func consumeTag(b []byte, msg string) (int32, protowire.Type, int, error) {
	v, n, err := consumeVarint(b)
	if err != nil {
		return 0, 0, 0, err
	}
	num := int32(v >> 3) //nolint:gosec // the generated decoder truncates the same way
	typ := protowire.Type(v & 7)
	if typ == protowire.EndGroupType {
		return 0, 0, 0, fmt.Errorf("proto: %s: wiretype end group for non-group", msg)
	}
	if num <= 0 {
		return 0, 0, 0, fmt.Errorf("proto: %s: illegal tag %d (wire type %d)", msg, num, v)
	}
	return num, typ, n, nil
}

func wrongType(msg string, num int32, typ protowire.Type) error {
	return fmt.Errorf("proto: %s: wrong wireType = %d for field %d", msg, typ, num)
}

// consumeMessage reads a length-delimited value (a message, string or
// bytes field) after its tag.
func consumeMessage(b []byte, typ protowire.Type, msg string, num int32) ([]byte, int, error) {
	if typ != protowire.BytesType {
		return nil, 0, wrongType(msg, num, typ)
	}
	l, n, err := consumeLength(b)
	if err != nil {
		return nil, 0, err
	}
	return b[n : n+l], n + l, nil
}

// consumeLength reads the length of a length-delimited value and checks
// that the value is within b.
func consumeLength(b []byte) (int, int, error) {
	v, n, err := consumeVarint(b)
	if err != nil {
		return 0, 0, err
	}
	if v > math.MaxInt64 {
		return 0, 0, errInvalidLength
	}
	if v > uint64(len(b)-n) { //nolint:gosec // n <= len(b)
		return 0, 0, io.ErrUnexpectedEOF
	}
	return int(v), n, nil
}

func consumeVarintField(b []byte, typ protowire.Type, msg string, num int32) (uint64, int, error) {
	if typ != protowire.VarintType {
		return 0, 0, wrongType(msg, num, typ)
	}
	return consumeVarint(b)
}

func consumeInt64(b []byte, typ protowire.Type, msg string, num int32) (int64, int, error) {
	v, n, err := consumeVarintField(b, typ, msg, num)
	return int64(v), n, err //nolint:gosec // proto3 int64 wire encoding
}

func consumeDouble(b []byte, typ protowire.Type, msg string, num int32) (float64, int, error) {
	if typ != protowire.Fixed64Type {
		return 0, 0, wrongType(msg, num, typ)
	}
	v, n := protowire.ConsumeFixed64(b)
	if n < 0 {
		return 0, 0, io.ErrUnexpectedEOF
	}
	return math.Float64frombits(v), n, nil
}

// skipField returns the length of the unknown field at the start of b, tag
// included, as the generated decoder skips it: groups nest without their
// end's field number being checked, and a value running past b is an error.
func skipField(b []byte) (int, error) {
	depth := 0
	for i := 0; i < len(b); {
		v, n, err := consumeVarint(b[i:])
		if err != nil {
			return 0, err
		}
		i += n
		if i, depth, err = skipValue(b, i, protowire.Type(v&7), depth); err != nil {
			return 0, err
		}
		if depth == 0 {
			if i > len(b) {
				return 0, io.ErrUnexpectedEOF
			}
			return i, nil
		}
	}
	return 0, io.ErrUnexpectedEOF
}

// skipValue skips the value of type typ at b[i:] and returns where the next
// tag starts, which may be past b, and the new group depth.
func skipValue(b []byte, i int, typ protowire.Type, depth int) (int, int, error) {
	switch typ {
	case protowire.VarintType:
		_, n, err := consumeVarint(b[i:])
		return i + n, depth, err
	case protowire.Fixed64Type:
		return i + 8, depth, nil
	case protowire.BytesType:
		v, n, err := consumeVarint(b[i:])
		if err != nil {
			return 0, 0, err
		}
		if v > uint64(len(b)-i-n) { //nolint:gosec // i+n <= len(b)
			// Past b: the generated decoder finds out one way or another.
			return 0, 0, io.ErrUnexpectedEOF
		}
		return i + n + int(v), depth, nil //nolint:gosec // v <= len(b)
	case protowire.StartGroupType:
		return i, depth + 1, nil
	case protowire.EndGroupType:
		if depth == 0 {
			return 0, 0, errEndOfGroup
		}
		return i, depth - 1, nil
	case protowire.Fixed32Type:
		return i + 4, depth, nil
	default:
		return 0, 0, fmt.Errorf("proto: illegal wireType %d", typ)
	}
}
