package gateway

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// A remote-write 2.0 request is small on the wire for what it becomes:
// two bytes (2a 00) are a series, 176 bytes once the generated decoder
// built it and 96 more once converted to 1.0, and a symbol referenced by
// every series is repeated in every 1.0 record. v2Cost walks a request
// without building anything and returns what decoding and converting it
// will hold at most (v2Counts.cost), so that the gateway refuses it, or
// waits for room, before any of it is allocated.

// Bytes charged per element of a 2.0 request, as the structs take in
// memory (unsafe.Sizeof on 64-bit platforms). The fast decoder (v2Decoder)
// builds the 1.0 request into arrays sized to v2Cost's counts; the
// generated decoder and fromV2, which take every other request, build
// 2.0 structs and then 1.0 ones, the request's symbols and series into
// arrays sized the same way, the rest of a series by append (growth).
// TestDecodersAllocateInProportionToTheirInput holds the sums to what
// decoding allocates.
const (
	sizeV2Series    = 176 // writev2.TimeSeries
	sizeV2Sample    = 56
	sizeV2Histogram = 280
	sizeV2Exemplar  = 72
	sizeV2Span      = 40
	sizeSeries      = 96 // prompb.TimeSeries
	sizeLabel       = 32
	sizeSample      = 16
	sizeHistogram   = 240
	sizeExemplar    = 40
	sizeSpan        = 8
	sizeMetadata    = 56
	sizeString      = 16 // a string header
	sizeOneof       = 16 // a count or zero count, allocated per occurrence
	sizeMapEntry    = 64 // a metric family in a map of families
)

// growth is how many elements' worth append allocates, garbage included,
// to grow a slice to k elements: about 1.25 times per step for large
// slices, so about five times k in all; one element is allocated once.
func growth(k int) int {
	if k <= 1 {
		return k
	}
	return 5 * k
}

// v2Counts is what v2Cost found in a request.
type v2Counts struct {
	symbols, series, refs, samples, metadata int
	// slow says the fast decoder declines the request (histograms,
	// exemplars, fields it does not take): the generated decoder's
	// allocations are the ones to count.
	slow bool
	// cost is the bytes decoding, converting and re-encoding the request
	// hold at most: fast or slowCost, as the request goes, and v1, the
	// 1.0 encoding.
	cost, fast, slowCost, v1 int
	// err is why walk could not count a series.
	err error
}

// total sets cost from the parts counted so far, and returns it.
func (c *v2Counts) total() int {
	c.cost = c.fast
	if c.slow {
		c.cost = c.slowCost
	}
	c.cost += c.v1
	return c.cost
}

// errNotV2 is wrapped by v2Cost's errors: the body does not parse.
var errNotV2 = errors.New("body is not a remote-write 2.0 Request")

// sizeInt is the size of an int: a symbol's length in v2Counts.walk's
// scratch.
const sizeInt = 8

// v2Cost walks the 2.0 request b, as the gateway does in two steps
// (v2Symbols, then walk). symbolLen is scratch for the symbols' lengths.
func v2Cost(b []byte, max int, symbolLen []int) (v2Counts, []int, error) {
	c, err := v2Symbols(b)
	if err != nil || c.total() > max {
		return c, symbolLen, err
	}
	symbolLen = c.walk(b, max, symbolLen)
	return c, symbolLen, c.err
}

// v2Symbols counts the symbols of the 2.0 request b and what they cost,
// allocating nothing, and checks that b is a sequence of fields.
func v2Symbols(b []byte) (v2Counts, error) {
	var c v2Counts
	for rest := b; len(rest) > 0; {
		num, _, v, n, err := field(rest)
		if err != nil {
			return c, err
		}
		if num == 4 {
			c.symbols++
			c.fast += sizeString
			c.slowCost += 2*sizeString + len(v) // the header, and the string copied
		}
		rest = rest[n:]
	}
	c.total()
	return c, nil
}

// walk counts the rest of b, whose symbols v2Symbols counted, into c:
// series, their elements, and the 1.0 bytes they become, which repeat
// each referenced symbol. It stops once c.cost is over max. symbolLen,
// scratch for the symbols' lengths (c.symbols ints), is returned for
// reuse; a field that does not parse is left in c.err.
func (c *v2Counts) walk(b []byte, max int, symbolLen []int) []int {
	symbolLen = reserve(symbolLen, c.symbols)
	for rest := b; len(rest) > 0; {
		num, _, v, n, _ := field(rest)
		if num == 4 {
			symbolLen = append(symbolLen, len(v))
		}
		rest = rest[n:]
	}
	for rest := b; len(rest) > 0 && c.total() <= max; {
		num, _, v, n, _ := field(rest)
		switch num {
		case 4:
		case 5:
			if c.err = c.timeSeries(v, symbolLen); c.err != nil {
				return symbolLen
			}
		default:
			c.unknown(n)
		}
		rest = rest[n:]
	}
	c.total()
	return symbolLen
}

// unknown counts a field of n bytes the generated decoder keeps as
// unrecognized bytes, appended.
func (c *v2Counts) unknown(n int) {
	c.slow = true
	c.slowCost += growth(n)
}

// timeSeries counts a TimeSeries and the 1.0 bytes it becomes.
func (c *v2Counts) timeSeries(b []byte, symbolLen []int) error {
	c.series++
	c.fast += sizeSeries
	c.slowCost += sizeV2Series + sizeSeries
	c.v1 += 4 // tag and length of the series
	var samples, histograms, exemplars, unpacked int
	for len(b) > 0 {
		num, typ, v, n, err := field(b)
		if err != nil {
			return err
		}
		switch num {
		case 1:
			refs, labelBytes := countRefs(v, typ, symbolLen)
			if typ != protowire.BytesType {
				unpacked++
			}
			c.refs += refs
			c.fast += refs * sizeLabel / 2
			c.slowCost += refs * (4 + sizeLabel/2)
			c.v1 += labelBytes
		case 2:
			samples++
			c.v1 += 22 // tag, length, value and timestamp
		case 3:
			c.slow = true
			histograms++
			cost, err := histogramCost(v)
			if err != nil {
				return err
			}
			c.slowCost += cost
			c.v1 += 3 + len(v)
		case 4:
			c.slow = true
			exemplars++
			refs, labelBytes, err := exemplarCost(v, symbolLen)
			if err != nil {
				return err
			}
			c.slowCost += refs * (4 + sizeLabel/2)
			c.v1 += 24 + labelBytes
		case 5:
			c.metadata++
			c.fast += sizeMetadata + sizeMapEntry
			c.slowCost += sizeMetadata + 2*sizeMapEntry
			c.v1 += 16 + metadataBytes(v, symbolLen)
		default:
			c.unknown(n)
		}
		b = b[n:]
	}
	c.samples += samples
	c.fast += samples * sizeSample
	c.slowCost += growth(samples)*sizeV2Sample + samples*sizeSample +
		growth(histograms)*(sizeV2Histogram+sizeHistogram) +
		growth(exemplars)*(sizeV2Exemplar+sizeExemplar) +
		growth(unpacked)*4
	return nil
}

// countRefs counts the label references of a labels_refs field (packed, or
// one varint) and the bytes of the 1.0 labels they become: each pair is a
// Label of a name and a value, each with a tag and a length.
func countRefs(v []byte, typ protowire.Type, symbolLen []int) (refs, labelBytes int) {
	if typ == protowire.VarintType {
		return 1, symbolBytes(v, symbolLen)
	}
	for len(v) > 0 {
		x, n := consumeVarint(v)
		if n < 0 {
			break
		}
		refs++
		labelBytes += 4 + symbolSize(x, symbolLen)
		v = v[n:]
	}
	return refs, labelBytes
}

// symbolBytes is the 1.0 bytes of the one reference in the varint v.
func symbolBytes(v []byte, symbolLen []int) int {
	x, n := protowire.ConsumeVarint(v)
	if n < 0 {
		return 0
	}
	return 4 + symbolSize(x, symbolLen)
}

// symbolSize is the length of symbol ref, 0 for a reference outside the
// table (which the decoders refuse).
func symbolSize(ref uint64, symbolLen []int) int {
	if ref >= uint64(len(symbolLen)) {
		return 0
	}
	return symbolLen[ref]
}

// histogramCost is what a Histogram costs but for the structs
// themselves: its spans (appended, then copied), its buckets (a packed
// field allocated to its count, which its bytes bound; unpacked ones
// appended), and a wrapper per count or zero count, each occurrence
// allocated anew.
func histogramCost(b []byte) (int, error) {
	cost, spans, buckets := 2*sizeOneof, [2]int{}, [5]int{}
	for len(b) > 0 {
		num, typ, v, n, err := field(b)
		if err != nil {
			return 0, err
		}
		switch {
		case num == 8 || num == 11:
			spans[num/11]++
		case (num == 9 || num == 12) && typ == protowire.BytesType:
			cost += 8 * len(v) // a varint takes a byte at least
		case (num == 10 || num == 13 || num == 16) && typ == protowire.BytesType:
			cost += 8 * (len(v) / 8)
		case num == 9 || num == 10 || num == 12 || num == 13 || num == 16:
			buckets[num%5]++
		case num == 1 || num == 2 || num == 6 || num == 7:
			cost += sizeOneof
		case num > 17:
			cost += growth(n)
		}
		b = b[n:]
	}
	for _, k := range spans {
		cost += growth(k)*sizeV2Span + k*sizeSpan
	}
	for _, k := range buckets {
		cost += growth(k) * 8
	}
	return cost, nil
}

// exemplarCost counts an Exemplar's label references and their 1.0 bytes.
func exemplarCost(b []byte, symbolLen []int) (refs, labelBytes int, err error) {
	for len(b) > 0 {
		num, typ, v, n, err := field(b)
		if err != nil {
			return 0, 0, err
		}
		if num == 1 {
			r, lb := countRefs(v, typ, symbolLen)
			refs, labelBytes = refs+r, labelBytes+lb
		}
		b = b[n:]
	}
	return refs, labelBytes, nil
}

// metadataBytes is the 1.0 bytes of a Metadata's help and unit.
func metadataBytes(b []byte, symbolLen []int) int {
	total := 0
	for len(b) > 0 {
		num, _, v, n, err := field(b)
		if err != nil {
			return total
		}
		if num == 3 || num == 4 {
			total += symbolBytes(v, symbolLen)
		}
		b = b[n:]
	}
	return total
}

// field splits off b its first field: number, type, content (the bytes of
// a length-delimited field, the encoding of any other) and length.
func field(b []byte) (protowire.Number, protowire.Type, []byte, int, error) {
	// A bytes field of a one-byte tag and a one-byte length, nearly every
	// field of a real request: read here without protowire's calls, which
	// were most of the walk's time.
	if len(b) >= 2 && b[0] < 0x80 && b[0]&7 == byte(protowire.BytesType) && b[1] < 0x80 && int(b[1]) <= len(b)-2 {
		n := 2 + int(b[1])
		return protowire.Number(b[0] >> 3), protowire.BytesType, b[2:n], n, nil
	}
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, 0, fmt.Errorf("%w: %w", errNotV2, protowire.ParseError(n))
	}
	m := protowire.ConsumeFieldValue(num, typ, b[n:])
	if m < 0 {
		return 0, 0, nil, 0, fmt.Errorf("%w: field %d: %w", errNotV2, num, protowire.ParseError(m))
	}
	v := b[n : n+m]
	if typ == protowire.BytesType {
		v, _ = protowire.ConsumeBytes(v)
	}
	return num, typ, v, n + m, nil
}
