package gateway

import (
	"encoding/binary"
	"math"
	"net/http"
	"unsafe"

	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/proto/wire"
)

// v2Decoder converts the remote-write 2.0 requests real senders write
// straight from their encoding to the 1.0 request, into arrays kept from
// one request to the next, its strings pointing into the encoding: the
// generated decoder followed by fromV2 allocated a string per symbol and
// a slice per series, and was most of a 2.0 request's CPU.
//
// It takes only what it is sure of: series of labels, samples and
// metadata, every field of its expected wire type, every reference inside
// the symbols table, nothing unknown. Anything else (histograms,
// exemplars, an odd number of label references, a field it does not
// know, a malformed one) makes it decline, and the request goes the
// generated decoder's way, which has the last word on what is accepted
// and says why it is not. What it takes it converts exactly as fromV2
// does (FuzzDecodeV2 compares the two).
type v2Decoder struct {
	symbols  []string
	series   []prompb.TimeSeries
	labels   []prompb.Label
	samples  []prompb.Sample
	metadata []prompb.MetricMetadata
	families map[string]struct{}
}

// Tags of the fields the decoder takes, as their one-byte encodings.
const (
	tagSymbols     = 4<<3 | byte(protowire.BytesType)
	tagTimeSeries  = 5<<3 | byte(protowire.BytesType)
	tagLabelsRefs  = 1<<3 | byte(protowire.BytesType) // packed
	tagSample      = 2<<3 | byte(protowire.BytesType)
	tagMetadata    = 5<<3 | byte(protowire.BytesType)
	tagSampleValue = 1<<3 | byte(protowire.Fixed64Type)
	tagSampleTime  = 2<<3 | byte(protowire.VarintType)
	tagSampleStart = 3<<3 | byte(protowire.VarintType)
	tagMetaType    = 1<<3 | byte(protowire.VarintType)
	tagMetaHelp    = 3<<3 | byte(protowire.VarintType)
	tagMetaUnit    = 4<<3 | byte(protowire.VarintType)
)

// decode sets out to the 1.0 form of the 2.0 request b, whose counts
// v2Cost found to be c, and reports whether it could; out's slices are
// valid until the next decode, its strings while b is unchanged. Its
// arrays are sized to c before decoding, never grown by append.
func (d *v2Decoder) decode(b []byte, out *prompb.WriteRequest, c v2Counts) bool {
	d.symbols, d.series, d.labels, d.samples, d.metadata = reserve(d.symbols, c.symbols), reserve(d.series, c.series), reserve(d.labels, c.refs/2), reserve(d.samples, c.samples), reserve(d.metadata, c.metadata)
	if d.families == nil {
		d.families = map[string]struct{}{}
	}
	clear(d.families)
	*out = prompb.WriteRequest{}
	// The symbols first: a series may come before the symbols it names.
	for rest := b; len(rest) > 0; {
		tag, v, n := nextV2Field(rest)
		switch {
		case n <= 0:
			return false
		case tag == tagSymbols:
			d.symbols = append(d.symbols, unsafeString(v))
		case tag != tagTimeSeries:
			return false
		}
		rest = rest[n:]
	}
	for len(b) > 0 {
		tag, v, n := nextV2Field(b)
		if tag == tagTimeSeries && !d.timeSeries(v) {
			return false
		}
		b = b[n:]
	}
	// As fromV2 builds them: never nil series, nil metadata when none.
	out.Timeseries = d.series[:len(d.series):len(d.series)]
	if len(d.metadata) > 0 {
		out.Metadata = d.metadata[:len(d.metadata):len(d.metadata)]
	}
	return true
}

// reserve returns s emptied, with room for n elements: reused when it has
// it, else allocated exactly, so that decoding allocates what v2Cost
// counted and no more.
func reserve[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, 0, n)
	}
	return s[:0]
}

// timeSeries adds the series b.
func (d *v2Decoder) timeSeries(b []byte) bool {
	labels, samples := len(d.labels), len(d.samples)
	var refs []byte
	var md, seenRefs, seenMd bool
	var mdType, help, unit uint64
	for len(b) > 0 {
		tag, v, n := nextV2Field(b)
		switch {
		case n <= 0:
			return false
		case tag == tagLabelsRefs && !seenRefs:
			refs, seenRefs = v, true
		case tag == tagSample:
			var s prompb.Sample
			if !decodeV2Sample(v, &s) {
				return false
			}
			d.samples = append(d.samples, s)
		case tag == tagMetadata && !seenMd:
			if mdType, help, unit, md = decodeV2Metadata(v); !md {
				return false
			}
			seenMd = true
		default:
			return false
		}
		b = b[n:]
	}
	if !d.resolve(refs) {
		return false
	}
	ts := prompb.TimeSeries{Labels: d.labels[labels:len(d.labels):len(d.labels)]}
	if len(d.samples) > samples {
		ts.Samples = d.samples[samples:len(d.samples):len(d.samples)]
	}
	if md && (mdType != 0 || help != 0 || unit != 0) && !d.addMetadata(mdType, help, unit, ts.Labels) {
		return false
	}
	d.series = append(d.series, ts)
	return true
}

// resolve appends the labels of the packed name/value references refs.
func (d *v2Decoder) resolve(refs []byte) bool {
	var name uint32
	odd := false
	for len(refs) > 0 {
		x, n := consumeUint32(refs)
		if n <= 0 || int64(x) >= int64(len(d.symbols)) {
			return false
		}
		if odd {
			d.labels = append(d.labels, prompb.Label{Name: d.symbols[name], Value: d.symbols[x]})
		}
		name, odd = x, !odd
		refs = refs[n:]
	}
	return !odd
}

// addMetadata files a series' metadata under its metric name, the first
// of a family winning, as metadataFromV2 and fromV2 do.
func (d *v2Decoder) addMetadata(typ, help, unit uint64, ls []prompb.Label) bool {
	if help >= uint64(len(d.symbols)) || unit >= uint64(len(d.symbols)) {
		return false
	}
	for _, l := range ls {
		if l.Name != "__name__" {
			continue
		}
		if _, ok := d.families[l.Value]; !ok {
			d.families[l.Value] = struct{}{}
			d.metadata = append(d.metadata, prompb.MetricMetadata{
				Type:             prompb.MetricMetadata_MetricType(typ), //nolint:gosec // at most math.MaxInt32, see decodeV2Metadata
				MetricFamilyName: l.Value,
				Help:             d.symbols[help],
				Unit:             d.symbols[unit],
			})
		}
		return true
	}
	return true
}

// decodeV2Sample reads a Sample: its value and timestamp; the start
// timestamp, which 1.0 cannot carry, is read and dropped.
func decodeV2Sample(b []byte, s *prompb.Sample) bool {
	for len(b) > 0 {
		switch b[0] {
		case tagSampleValue:
			if len(b) < 9 {
				return false
			}
			s.Value = math.Float64frombits(binary.LittleEndian.Uint64(b[1:]))
			b = b[9:]
		case tagSampleTime, tagSampleStart:
			x, n := consumeVarint(b[1:])
			if n <= 0 {
				return false
			}
			if b[0] == tagSampleTime {
				s.Timestamp = int64(x) //nolint:gosec // proto3 int64 wire encoding
			}
			b = b[1+n:]
		default:
			return false
		}
	}
	return true
}

// decodeV2Metadata reads a Metadata: its type and help and unit
// references. A type over math.MaxInt32 (the generated decoder would
// truncate it) is declined.
func decodeV2Metadata(b []byte) (typ, help, unit uint64, ok bool) {
	for len(b) > 0 {
		if b[0] != tagMetaType && b[0] != tagMetaHelp && b[0] != tagMetaUnit {
			return 0, 0, 0, false
		}
		x, n := consumeVarint(b[1:])
		if n <= 0 || x > math.MaxInt32 {
			return 0, 0, 0, false
		}
		switch b[0] {
		case tagMetaType:
			typ = x
		case tagMetaHelp:
			help = x
		case tagMetaUnit:
			unit = x
		}
		b = b[1+n:]
	}
	return typ, help, unit, true
}

// nextV2Field splits off b a bytes field with a one-byte tag: the tag,
// its content and the bytes it takes; n <= 0 for any other field (the
// callers decline those) or a truncated one.
func nextV2Field(b []byte) (tag byte, v []byte, n int) {
	if len(b) == 0 || b[0] >= 0x80 || b[0]&7 != byte(protowire.BytesType) {
		return 0, nil, -1
	}
	l, m := consumeVarint(b[1:])
	if m <= 0 || l > uint64(len(b)-1-m) { //nolint:gosec // m < len(b): not negative
		return 0, nil, -1
	}
	end := 1 + m + int(l) //nolint:gosec // l <= len(b): fits an int
	return b[0], b[1+m : end], end
}

// consumeVarint reads a varint as protowire does; n <= 0 where it would
// refuse it (a ten-byte varint that overflows, which the generated decoder
// truncates instead: declined).
func consumeVarint(b []byte) (uint64, int) {
	if len(b) > 0 && b[0] < 0x80 {
		return uint64(b[0]), 1
	}
	return protowire.ConsumeVarint(b)
}

// consumeUint32 reads a varint of a uint32 field, declining one the
// generated decoder would truncate.
func consumeUint32(b []byte) (uint32, int) {
	x, n := consumeVarint(b)
	if n <= 0 || x > math.MaxUint32 {
		return 0, -1
	}
	return uint32(x), n
}

// unsafeString is b as a string without a copy; b must not change while
// the string is in use.
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b)) //nolint:gosec // b is the request's decompressed body, unchanged until the request is answered
}

// decodeV2 counts what the 2.0 request will cost (v2Cost), refuses it
// over the bound, holds the cost, then converts it with the fast decoder
// or, when that declines, the generated one and fromV2.
func (g *Gateway) decodeV2(raw []byte, s *scratch) (*prompb.WriteRequest, int64, *reject) {
	lim := g.cfg.Limits.Wire()
	bound := wire.MaxAllocFactor * wire.MaxDecodedBytes(lim.MaxExpansion, len(raw))
	// The symbols' lengths are scratch the walk needs: held first.
	c, err := v2Symbols(raw)
	if err != nil {
		return nil, 0, badRequest(reasonBadBody, "%v", err)
	}
	// held stays held until the request is answered: the lengths
	// live in s until then.
	held := int64(c.symbols) * sizeInt
	if c.total() <= bound {
		if rej := g.hold(held); rej != nil {
			return nil, 0, rej
		}
		s.symbolLen = c.walk(raw, bound, s.symbolLen)
		err = c.err
	} else {
		held = 0
	}
	switch {
	case err != nil:
		return nil, held, badRequest(reasonBadBody, "%v", err)
	case c.cost > bound:
		return nil, held, badRequest(reasonBadBody, "remote-write 2.0 request of %d bytes would take more than %d bytes once decoded and converted to 1.0 (%d times its size: empty or repeated elements)", len(raw), bound, wire.MaxAllocFactor*lim.MaxExpansion)
	case lim.MaxSeries > 0 && c.series > lim.MaxSeries:
		return nil, held, badRequest(reasonBadBody, "%d series in one request, more than %d (-limits.max-series-per-request)", c.series, lim.MaxSeries)
	}
	if rej := g.hold(int64(c.cost)); rej != nil {
		return nil, held, rej
	}
	held += int64(c.cost)
	s.decoded = held
	req, rej := decodeV2(raw, s, c)
	if rej == nil {
		rej = checkSamplesPerSeries(req, lim.MaxSamplesPerSeries)
	}
	return req, held, rej
}

// decodeV2 converts raw, whose counts are c, to 1.0.
func decodeV2(raw []byte, s *scratch, c v2Counts) (*prompb.WriteRequest, *reject) {
	if !c.slow && s.dec2.decode(raw, &s.req, c) {
		return &s.req, nil
	}
	// Sized before: the generated decoder grows them by append, which
	// allocates about five times a large slice's final size.
	req2 := writev2.Request{Symbols: make([]string, 0, c.symbols), Timeseries: make([]writev2.TimeSeries, 0, c.series)}
	if err := req2.Unmarshal(raw); err != nil {
		return nil, badRequest(reasonBadBody, "body is not a remote-write 2.0 Request: %v", err)
	}
	req, err := fromV2(&req2, c.metadata)
	if err != nil {
		return nil, badRequest(reasonBadBody, "remote-write 2.0 request: %v", err)
	}
	return req, nil
}

// checkSamplesPerSeries refuses what the pusher's decoder would refuse in
// the records: a series with more than limit samples, histograms or
// exemplars.
func checkSamplesPerSeries(req *prompb.WriteRequest, limit int) *reject {
	for i := range req.Timeseries {
		ts := &req.Timeseries[i]
		if limit > 0 && max(len(ts.Samples), len(ts.Histograms), len(ts.Exemplars)) > limit {
			return rejectf(http.StatusBadRequest, reasonBadBody, "series %d has more than %d samples, histograms or exemplars (-limits.max-samples-per-series)", i, limit)
		}
	}
	return nil
}
