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

// Bytes charged per element of a 2.0 request: the generated decoder's
// struct (doubled where it grows a slice by append), fromV2's 1.0 struct,
// and, for the fast decoder, its reused arrays. Struct sizes are
// unsafe.Sizeof on 64-bit platforms (TestV2CostCoversTheDecoders holds
// the sum to what decoding allocates).
const (
	costSymbol    = 2 * 16     // a string header in a slice grown by append
	costSeries    = 2*176 + 96 // writev2.TimeSeries, prompb.TimeSeries
	costRef       = 2*4 + 32/2 // a uint32 (appended when not packed), half a prompb.Label
	costSample    = 2*56 + 16  // writev2.Sample, prompb.Sample
	costHistogram = 2*280 + 2*240 + 64
	costSpan      = 2*40 + 8 // writev2.BucketSpan, prompb.BucketSpan
	costBucket    = 2 * 8    // a delta or count, shared by the 1.0 histogram
	costOneof     = 16       // a count or zero count, allocated per occurrence
	costExemplar  = 2*72 + 2*40
	costMetadata  = 2*56 + 64 // prompb.MetricMetadata and its family's map entry
	costUnknown   = 2         // per byte: XXX_unrecognized keeps unknown fields
)

// v2Counts is what v2Cost found in a request.
type v2Counts struct {
	symbols, series, refs, samples, metadata int
	// slow says the fast decoder declines the request (histograms,
	// exemplars, fields it does not take): the generated decoder's
	// allocations are the ones to count.
	slow bool
	// cost is the bytes decoding, converting and re-encoding the request
	// hold at most; v1 is the 1.0 encoding's share of it.
	cost, v1 int
}

// errNotV2 is wrapped by v2Cost's errors: the body does not parse.
var errNotV2 = errors.New("body is not a remote-write 2.0 Request")

// v2Cost walks the 2.0 request b. symbolLen is scratch for the symbols'
// lengths, which the 1.0 encoding repeats per reference; it is grown only
// after the symbols alone were found within max, the most the request may
// cost. A request over max is refused with counts whose cost is over max.
func v2Cost(b []byte, max int, symbolLen []int) (v2Counts, []int, error) {
	var c v2Counts
	for rest := b; len(rest) > 0; {
		num, _, v, n, err := field(rest)
		if err != nil {
			return c, symbolLen, err
		}
		if num == 4 {
			c.symbols++
			c.cost += costSymbol + len(v)
		}
		rest = rest[n:]
	}
	if c.cost > max {
		return c, symbolLen, nil
	}
	symbolLen = symbolLen[:0]
	for rest := b; len(rest) > 0; {
		num, _, v, n, _ := field(rest)
		if num == 4 {
			symbolLen = append(symbolLen, len(v))
		}
		rest = rest[n:]
	}
	for rest := b; len(rest) > 0 && c.cost <= max; {
		num, _, v, n, _ := field(rest)
		switch num {
		case 4:
		case 5:
			if err := c.timeSeries(v, symbolLen); err != nil {
				return c, symbolLen, err
			}
		default:
			c.slow = true
			c.cost += costUnknown * n
		}
		rest = rest[n:]
	}
	c.cost += c.v1
	return c, symbolLen, nil
}

// timeSeries counts a TimeSeries and the 1.0 bytes it becomes.
func (c *v2Counts) timeSeries(b []byte, symbolLen []int) error {
	c.series++
	c.cost += costSeries
	c.v1 += 4 // tag and length of the series
	for len(b) > 0 {
		num, typ, v, n, err := field(b)
		if err != nil {
			return err
		}
		switch {
		case num == 1:
			refs, labelBytes := countRefs(v, typ, symbolLen)
			c.refs += refs
			c.cost += costRef * refs
			c.v1 += labelBytes
		case num == 2:
			c.samples++
			c.cost += costSample
			c.v1 += 22 // tag, length, value and timestamp
		case num == 3:
			c.slow = true
			cost, err := histogramCost(v)
			if err != nil {
				return err
			}
			c.cost += cost
			c.v1 += 3 + len(v)
		case num == 4:
			c.slow = true
			refs, labelBytes, err := exemplarCost(v, symbolLen)
			if err != nil {
				return err
			}
			c.cost += costExemplar + costRef*refs
			c.v1 += 24 + labelBytes
		case num == 5:
			c.metadata++
			c.cost += costMetadata
			c.v1 += 16 + metadataBytes(v, symbolLen)
		default:
			c.slow = true
			c.cost += costUnknown * n
		}
		b = b[n:]
	}
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
		x, n := protowire.ConsumeVarint(v)
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

// histogramCost is what a Histogram costs: its structs, a span or bucket
// per element its packed fields may hold, a wrapper per count.
func histogramCost(b []byte) (int, error) {
	cost := costHistogram
	for len(b) > 0 {
		num, typ, v, n, err := field(b)
		if err != nil {
			return 0, err
		}
		switch {
		case num == 8 || num == 11:
			cost += costSpan
		case (num == 9 || num == 12) && typ == protowire.BytesType:
			cost += costBucket * len(v) // a varint takes a byte at least
		case (num == 10 || num == 13 || num == 16) && typ == protowire.BytesType:
			cost += costBucket * (len(v)/8 + 1)
		case num >= 9 && num <= 16 && num != 11 && num != 14 && num != 15:
			cost += costBucket
		case num == 1 || num == 2 || num == 6 || num == 7:
			cost += costOneof
		case num > 17:
			cost += costUnknown * n
		}
		b = b[n:]
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
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, 0, fmt.Errorf("%w: %v", errNotV2, protowire.ParseError(n))
	}
	m := protowire.ConsumeFieldValue(num, typ, b[n:])
	if m < 0 {
		return 0, 0, nil, 0, fmt.Errorf("%w: field %d: %v", errNotV2, num, protowire.ParseError(m))
	}
	v := b[n : n+m]
	if typ == protowire.BytesType {
		v, _ = protowire.ConsumeBytes(v)
	}
	return num, typ, v, n + m, nil
}
