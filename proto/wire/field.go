package wire

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// The field readers of this file follow protowire's rules exactly: a field
// is refused when protowire.ConsumeTag or ConsumeFieldValue would refuse
// it. ValidateWriteRequest and Envelope read with them. Decoder reads by the
// generated decoder's rules instead (see generated.go), which differ in
// corners.

// nextShortField is the inlined fast path of nextField: it splits off b a bytes
// field whose tag and length take one byte each, as the labels, samples and
// most series of a request do, and returns n = 0 for any other field.
func nextShortField(b []byte) (num protowire.Number, typ protowire.Type, v []byte, n int) {
	if len(b) < 2 || b[0] < 8 || b[0] >= 0x80 || b[0]&7 != byte(protowire.BytesType) || b[1] >= 0x80 || int(b[1]) > len(b)-2 {
		return 0, 0, nil, 0
	}
	return protowire.Number(b[0] >> 3), protowire.BytesType, b[2 : 2+int(b[1])], 2 + int(b[1])
}

// nextField splits the first field off b: its number, its wire type, its value
// (the content of a bytes field, the encoded value otherwise) and the
// number of bytes it takes. n < 0 means the field is truncated or
// malformed, exactly when protowire.ConsumeTag or ConsumeFieldValue would
// say so; fieldError then says how.
//
// One-byte tags (every field number below 16, so every field of a
// remote-write request) and one- and two-byte lengths are read here; longer
// varints are protowire's, and so are groups, rare and recursive.
func nextField(b []byte) (num protowire.Number, typ protowire.Type, v []byte, n int) {
	x, t := uint64(0), 1
	if len(b) > 0 && b[0] < 0x80 {
		x = uint64(b[0])
	} else if x, t = protowire.ConsumeVarint(b); t < 0 {
		return 0, 0, nil, -1
	}
	if x>>3 == 0 || x>>3 > math.MaxInt32 {
		return 0, 0, nil, -1
	}
	num, typ, b = protowire.Number(x>>3), protowire.Type(x&7), b[t:]
	switch typ {
	case protowire.BytesType:
		var l, m int
		switch {
		case len(b) > 0 && b[0] < 0x80:
			l, m = int(b[0]), 1
		case len(b) > 1 && b[1] < 0x80: // a series of 128 bytes to 16 KiB
			l, m = int(b[0]&0x7f)|int(b[1])<<7, 2
		default:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return 0, 0, nil, -1
			}
			return num, typ, v, t + m
		}
		if l > len(b)-m {
			return 0, 0, nil, -1
		}
		return num, typ, b[m : m+l], t + m + l
	case protowire.VarintType:
		_, m := protowire.ConsumeVarint(b)
		if m < 0 {
			return 0, 0, nil, -1
		}
		return num, typ, b[:m], t + m
	case protowire.Fixed64Type:
		if len(b) < 8 {
			return 0, 0, nil, -1
		}
		return num, typ, b[:8], t + 8
	case protowire.Fixed32Type:
		if len(b) < 4 {
			return 0, 0, nil, -1
		}
		return num, typ, b[:4], t + 4
	}
	m := protowire.ConsumeFieldValue(num, typ, b)
	if m < 0 {
		return 0, 0, nil, -1
	}
	return num, typ, b[:m], t + m
}

// fieldError says why nextField refused the first field of b. It parses the
// field again with protowire, so the words are protowire's; only a
// rejected record pays for it.
func fieldError(b []byte) error {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return protowire.ParseError(n)
	}
	m := protowire.ConsumeFieldValue(num, typ, b[n:])
	return fmt.Errorf("field %d: %w", num, protowire.ParseError(m))
}
