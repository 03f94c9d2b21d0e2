package wire

import (
	"errors"
	"fmt"
	"io"
	"math"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

// The readers of this file follow the rules of the generated (gogo)
// decoder rather than protowire's, so that Decoder accepts exactly what
// (*prompb.WriteRequest).Unmarshal accepts, errors included.

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

// nextBytesField reads the field at the start of b, a field of message
// msg, for the walks whose known fields are all length-delimited. A field
// whose number is in known (bit 1<<num) must be length-delimited: its value
// is returned in v and its number in num. Any other field is skipped, with
// num 0. n is the length of the whole field, tag included.
func nextBytesField(b []byte, msg string, known uint32) (num int32, v []byte, n int, err error) {
	// A known field with a one-byte tag and a one-byte length, as nearly
	// every label and sample is: the general path would read the same.
	if len(b) >= 2 && b[0] < 0x80 && b[0]&7 == byte(protowire.BytesType) && known&(1<<(b[0]>>3)) != 0 {
		if b[1] < 0x80 && int(b[1]) <= len(b)-2 {
			return int32(b[0] >> 3), b[2 : 2+int(b[1])], 2 + int(b[1]), nil
		}
		// And a two-byte length, as most series of a remote-write
		// request have (128 bytes to 16 KiB).
		if len(b) >= 3 && b[1] >= 0x80 && b[2] < 0x80 {
			if l := int(b[1]&0x7f) | int(b[2])<<7; l <= len(b)-3 {
				return int32(b[0] >> 3), b[3 : 3+l], 3 + l, nil
			}
		}
	}
	num, typ, n, err := consumeTag(b, msg)
	if err != nil {
		return 0, nil, 0, err
	}
	if num >= 32 || known&(1<<num) == 0 {
		n, err = skipField(b)
		return 0, nil, n, err
	}
	v, m, err := consumeMessage(b[n:], typ, msg, num)
	if err != nil {
		return 0, nil, 0, err
	}
	return num, v, n + m, nil
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
