package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// The pusher decodes every write request of a Push stream into memory
// reused from earlier requests: the generated decoder allocates a string
// per label name and value and a slice per series, about a thousand objects
// for 100 series, and that garbage was half of the pusher's CPU. Here
// label, exemplar and metadata strings point into the request's own encoded
// bytes, and every slice is a window on arrays kept from one request to the
// next.
//
// Decoder accepts exactly what (*prompb.WriteRequest).Unmarshal accepts
// and builds the same content, down to its quirks: ten-byte varints whose
// last byte overflows, field numbers truncated to 32 bits, groups skipped
// without matching their field numbers. FuzzDecodeWriteRequest compares
// the two.

// Decoder decodes WriteRequests into arrays it keeps between requests. A
// series' labels, samples, exemplars and histograms are consecutive windows
// of the arrays, with their capacity cut at their length so that a backend
// appending to one cannot overwrite the next. The windows, not the
// TimeSeries that hold them, are the decoder's: validation may move or
// clear TimeSeries, and the next Decode starts from the arrays again.
type Decoder struct {
	// Limits bound what one request may hold (see policy.go); the zero
	// value bounds nothing.
	Limits Limits

	budget int  // bytes the request may still take once decoded
	limit  int  // the budget the request started with
	sawV2  bool // a remote-write 2.0 field was seen

	series     []prompb.TimeSeries
	labels     []prompb.Label
	samples    []prompb.Sample
	exemplars  []prompb.Exemplar
	exLabels   []prompb.Label // exemplar labels, apart so series labels stay consecutive
	histograms []prompb.Histogram
	metadata   []prompb.MetricMetadata
}

// Decode sets wr to the WriteRequest encoded in b. The strings of wr point
// into b, which must not change while wr is in use; the slices of wr are
// valid until the next Decode. A Decoder is not safe for concurrent use:
// the pusher keeps one per pooled request.
func (d *Decoder) Decode(b []byte, wr *prompb.WriteRequest) error {
	d.reset()
	*wr = prompb.WriteRequest{}
	d.budget = d.Limits.Budget(len(b))
	d.limit = d.budget
	err := d.reserve(b)
	if err == nil {
		err = d.writeRequest(b)
	}
	if err != nil {
		if errors.Is(err, ErrRefused) {
			return err
		}
		return refuseSnappy(b, err)
	}
	if d.sawV2 && len(d.series) == 0 && len(d.metadata) == 0 {
		return ErrRemoteWrite2
	}
	wr.Timeseries = window(d.series, 0)
	wr.Metadata = window(d.metadata, 0)
	return nil
}

// Decoded returns the bytes the last Decode charged for what it built
// (the sizes of policy.go); the arrays holding them may have up to twice
// that capacity.
func (d *Decoder) Decoded() int { return d.limit - d.budget }

// reset truncates the arrays. Histograms are cleared first: the generated
// decoder allocated their slices, which a reused Decoder should not keep
// alive.
func (d *Decoder) reset() {
	clear(d.histograms)
	d.sawV2 = false
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

// Field numbers of the walks below, as nextBytesField's known sets.
const (
	writeRequestFields = 1<<1 | 1<<3               // timeseries, metadata
	timeSeriesFields   = 1<<1 | 1<<2 | 1<<3 | 1<<4 // labels, samples, exemplars, histograms
	labelFields        = 1<<1 | 1<<2               // name, value
)

func (d *Decoder) writeRequest(b []byte) error {
	for len(b) > 0 {
		if b[0] == tagV2Symbols || b[0] == tagV2TimeSeries {
			d.sawV2 = true
		}
		num, v, n, err := nextBytesField(b, "WriteRequest", writeRequestFields)
		switch {
		case err != nil:
			return err
		case num == 1:
			if limit := d.Limits.MaxSeries; limit > 0 && len(d.series) >= limit {
				return fmt.Errorf("%w: more than %d series in one request", ErrOverLimit, limit)
			}
			if err = d.charge(sizeSeries); err == nil {
				err = d.timeSeries(v)
			}
		case num == 3:
			if err = d.charge(sizeMetadata); err == nil {
				err = d.metricMetadata(v)
			}
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// tagLabel is the one-byte tag of a TimeSeries' labels, as the tags of
// validate.go.
const tagLabel = 1<<3 | byte(protowire.BytesType)

func (d *Decoder) timeSeries(b []byte) error {
	labels, samples, exemplars, histograms := len(d.labels), len(d.samples), len(d.exemplars), len(d.histograms)
	for len(b) > 0 {
		// A label of under 128 bytes, nearly every field of a series:
		// decoded here without the general walk's calls, which took as
		// long as the rest of the decoding. It reads what the general
		// path would, and a label changes nothing checkSeries counts.
		if len(b) >= 2 && b[0] == tagLabel && b[1] < 0x80 && int(b[1]) <= len(b)-2 {
			n := 2 + int(b[1])
			if err := d.label(b[2:n]); err != nil {
				return err
			}
			b = b[n:]
			continue
		}
		num, v, n, err := nextBytesField(b, "TimeSeries", timeSeriesFields)
		if err != nil {
			return err
		}
		if err := d.timeSeriesField(num, v); err != nil {
			return err
		}
		if err := d.checkSeries(samples, histograms, exemplars); err != nil {
			return err
		}
		b = b[n:]
	}
	if len(d.labels) == labels {
		return fmt.Errorf("series %d: %w", len(d.series), ErrSeriesWithoutLabels)
	}
	d.series = append(d.series, prompb.TimeSeries{
		Labels:     window(d.labels, labels),
		Samples:    window(d.samples, samples),
		Exemplars:  window(d.exemplars, exemplars),
		Histograms: window(d.histograms, histograms),
	})
	return nil
}

// timeSeriesField adds the TimeSeries field num with value v; num 0 (a
// skipped field) adds nothing.
func (d *Decoder) timeSeriesField(num int32, v []byte) error {
	switch num {
	case 1:
		return d.label(v)
	case 2:
		var s prompb.Sample
		if err := decodeSample(v, &s); err != nil {
			return err
		}
		if err := d.charge(sizeSample); err != nil {
			return err
		}
		d.samples = append(grow(d.samples, sizeSample, d.budget), s)
	case 3:
		if err := d.charge(sizeExemplar); err != nil {
			return err
		}
		var e prompb.Exemplar
		if err := d.exemplar(v, &e); err != nil {
			return err
		}
		d.exemplars = append(grow(d.exemplars, sizeExemplar, d.budget), e)
	case 4:
		return d.histogram(v)
	}
	return nil
}

// label adds the Label v to the series being decoded.
func (d *Decoder) label(v []byte) error {
	var l prompb.Label
	if err := decodeLabel(v, &l); err != nil {
		return err
	}
	if err := d.charge(sizeLabel); err != nil {
		return err
	}
	d.labels = append(grow(d.labels, sizeLabel, d.budget), l)
	return nil
}

// histogram adds the Histogram v. Histograms are rare: the generated
// decoder is good enough, and its slices are its own, allocated to the
// counts it finds (packed fields) or grown by append, so their memory is
// proportional to v; it is charged once they are decoded.
func (d *Decoder) histogram(v []byte) error {
	if err := d.charge(sizeHistogram); err != nil {
		return err
	}
	d.histograms = append(grow(d.histograms, sizeHistogram, d.budget), prompb.Histogram{})
	h := &d.histograms[len(d.histograms)-1]
	if err := h.Unmarshal(v); err != nil {
		return fmt.Errorf("histogram: %w", err)
	}
	return d.charge(sizeSpan*(cap(h.NegativeSpans)+cap(h.PositiveSpans)) +
		sizeCount*(cap(h.NegativeDeltas)+cap(h.NegativeCounts)+cap(h.PositiveDeltas)+cap(h.PositiveCounts)))
}

// reserve counts the series and metadata of b, refuses a request with
// more than MaxSeries series or whose series and metadata alone are over
// the budget, and sizes the arrays to hold exactly what b has: a
// request's cost is known before anything is allocated for it. A field
// that does not parse ends the count; writeRequest then says why.
func (d *Decoder) reserve(b []byte) error {
	var series, metadata int
	for len(b) > 0 {
		num, _, n, err := nextBytesField(b, "WriteRequest", writeRequestFields)
		if err != nil {
			break
		}
		switch num {
		case 1:
			series++
		case 3:
			metadata++
		}
		b = b[n:]
	}
	if limit := d.Limits.MaxSeries; limit > 0 && series > limit {
		return fmt.Errorf("%w: %d series in one request, more than %d", ErrOverLimit, series, limit)
	}
	if series > d.budget/sizeSeries || metadata > d.budget/sizeMetadata ||
		series*sizeSeries+metadata*sizeMetadata > d.budget {
		return d.overBudget()
	}
	if cap(d.series) < series {
		d.series = make([]prompb.TimeSeries, 0, series)
	}
	if cap(d.metadata) < metadata {
		d.metadata = make([]prompb.MetricMetadata, 0, metadata)
	}
	return nil
}

// grow makes room for one more element of size bytes in s: twice the
// capacity (append's own growth is 1.25 times for large slices, which
// allocates about five times the final size along the way), but never
// more than the budget left can fill.
func grow[T any](s []T, size, budget int) []T {
	if len(s) < cap(s) {
		return s
	}
	n := min(max(2*cap(s), 64), len(s)+budget/size+1)
	ns := make([]T, len(s), n)
	copy(ns, s)
	return ns
}

func (d *Decoder) overBudget() error {
	return fmt.Errorf("%w: the request takes more than %d times its size once decoded (more than %d bytes)", ErrOverLimit, d.Limits.MaxExpansion, d.limit)
}

// charge takes n bytes of decoded memory from the request's budget.
func (d *Decoder) charge(n int) error {
	if n > d.budget {
		return d.overBudget()
	}
	d.budget -= n
	return nil
}

// checkSeries checks the series being decoded, whose samples, histograms
// and exemplars start at the given indexes, against MaxSamplesPerSeries.
func (d *Decoder) checkSeries(samples, histograms, exemplars int) error {
	limit := d.Limits.MaxSamplesPerSeries
	if limit <= 0 || (len(d.samples)-samples <= limit && len(d.histograms)-histograms <= limit && len(d.exemplars)-exemplars <= limit) {
		return nil
	}
	return fmt.Errorf("%w: series %d has more than %d samples, histograms or exemplars", ErrOverLimit, len(d.series), limit)
}

func decodeLabel(b []byte, l *prompb.Label) error {
	// The name and then the value (left out when empty), each under 128
	// bytes, and nothing else: how every encoder writes a label. The
	// general loop below would read the same.
	if len(b) >= 2 && b[0] == tagLabelName && b[1] < 0x80 && int(b[1]) <= len(b)-2 {
		n := 2 + int(b[1])
		v := b[n:]
		if len(v) == 0 {
			l.Name = unsafeString(b[2:n])
			return nil
		}
		if len(v) >= 2 && v[0] == tagLabelValue && v[1] < 0x80 && int(v[1]) == len(v)-2 {
			l.Name, l.Value = unsafeString(b[2:n]), unsafeString(v[2:])
			return nil
		}
	}
	for len(b) > 0 {
		num, v, n, err := nextBytesField(b, "Label", labelFields)
		switch {
		case err != nil:
			return err
		case num == 1:
			l.Name = unsafeString(v)
		case num == 2:
			l.Value = unsafeString(v)
		}
		b = b[n:]
	}
	return nil
}

func decodeSample(b []byte, s *prompb.Sample) error {
	// The value and then the timestamp, and nothing else: how every
	// encoder writes a sample whose value and timestamp are not zero (a
	// zero is left out, and the general loop below reads that). The loop
	// would read the same.
	if len(b) >= 11 && b[0] == tagSampleVal && b[9] == tagSampleTime {
		if t, n, err := consumeVarint(b[10:]); err == nil && 10+n == len(b) {
			s.Value = math.Float64frombits(binary.LittleEndian.Uint64(b[1:9]))
			s.Timestamp = int64(t) //nolint:gosec // proto3 int64 wire encoding
			return nil
		}
	}
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

func (d *Decoder) exemplar(b []byte, e *prompb.Exemplar) error {
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

func (d *Decoder) exemplarLabel(b []byte) error {
	var l prompb.Label
	if err := decodeLabel(b, &l); err != nil {
		return err
	}
	if err := d.charge(sizeLabel); err != nil {
		return err
	}
	d.exLabels = append(grow(d.exLabels, sizeLabel, d.budget), l)
	return nil
}

func (d *Decoder) metricMetadata(b []byte) error {
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
