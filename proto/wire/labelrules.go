package wire

import (
	"encoding/binary"
	"unicode/utf8"
)

// The rules of this file are the pusher's rules for label names and
// values (limits.Limits.Filter), as fast paths: a classic name, valid
// under both of Prometheus' name validation schemes. They live here, below both doors, so that
// Scan applies them while it reads each label, and the pusher and the
// gateway judge a label by the same code. They run on every label of every
// series the pusher and the gateway take in, and were a third of the
// gateway's CPU time (issue 13).

// highBits has the high bit of every byte of a word: a word of ASCII bytes
// has none of them.
const highBits = 0x8080808080808080

// Classes of the bytes of label and metric names, as bits of nameClass.
const (
	labelNameStart  = 1 << iota // may start a label name: [a-zA-Z_]
	labelNameByte               // may follow: [a-zA-Z0-9_]
	metricNameStart             // may start a metric name: [a-zA-Z_:]
	metricNameByte              // may follow: [a-zA-Z0-9_:]
)

// nameClass classifies every byte for the name rules below: one table
// load per byte where the rules spelt as comparisons took several
// branches, which showed in the checks of every label of every series.
var nameClass = func() (t [256]uint8) {
	for c := range 256 {
		letter := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		digit := c >= '0' && c <= '9'
		if letter {
			t[c] |= labelNameStart | labelNameByte | metricNameStart | metricNameByte
		}
		if digit {
			t[c] |= labelNameByte | metricNameByte
		}
		if c == ':' {
			t[c] |= metricNameStart | metricNameByte
		}
	}
	return t
}()

// ValidLabelName reports whether s is a label name by Prometheus' classic
// rule, [a-zA-Z_][a-zA-Z0-9_]*, as model.LegacyValidation judges it (a
// test holds it to that). A classic name is valid under UTF-8 validation
// too, so the callers ask it first, one table load per byte, and leave
// only the rest to the scheme.
func ValidLabelName(s string) bool {
	return validName(s, labelNameStart, labelNameByte)
}

// ValidMetricName reports whether s is a classic metric name,
// [a-zA-Z_:][a-zA-Z0-9_:]*, as model.LegacyValidation judges it.
func ValidMetricName(s string) bool {
	return validName(s, metricNameStart, metricNameByte)
}

// validName reports whether s is a first byte of class start followed by
// bytes of class rest.
func validName(s string, start, rest uint8) bool {
	if s == "" || nameClass[s[0]]&start == 0 {
		return false
	}
	for i := 1; i < len(s); i++ {
		if nameClass[s[i]]&rest == 0 {
			return false
		}
	}
	return true
}

// ValidUTF8 is utf8.ValidString (the rule for label values) with a fast
// path for ASCII, which nearly every label value is: utf8.ValidString
// reads ASCII eight bytes at a time too, but the rest of a string, most of
// a value of a dozen bytes, one byte at a time. A value with a byte of 0x80 or more is utf8.ValidString's to
// decode.
func ValidUTF8(s string) bool {
	n := len(s)
	switch {
	case n >= 8:
		for i := 0; i < n-8; i += 8 {
			if word64(s, i)&highBits != 0 {
				return utf8.ValidString(s)
			}
		}
		if word64(s, n-8)&highBits != 0 {
			return utf8.ValidString(s)
		}
	case n >= 4:
		if (word32(s, 0)|word32(s, n-4))&highBits != 0 {
			return utf8.ValidString(s)
		}
	default:
		for i := range n {
			if s[i] >= utf8.RuneSelf {
				return utf8.ValidString(s)
			}
		}
	}
	return true
}

// word64 is the 8 bytes of s at i as a little-endian word, which the
// compiler reads with one load.
func word64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// word32 is the 4 bytes of s at i as a little-endian word.
func word32(s string, i int) uint64 {
	s = s[i : i+4]
	return uint64(uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24)
}

// The rules again, on the bytes of a request, for Scan: eight bytes at a
// time with no branch per byte, where the table above takes a load and a
// branch per byte, which mispredicts at the end of every name. Scan reads
// a name of up to eight bytes as one word from the request around it.

// ones has a one in every byte of a word.
const ones = 0x0101010101010101

// nameBits returns, of each byte of x, its high bit when the byte is of
// [a-zA-Z0-9_], or ':' too when colon. Each byte is compared on its low
// seven bits, which added to a constant below 0x80 carry into its own high
// bit and never into the next byte; bytes of 0x80 or more are not names'.
func nameBits(x uint64, colon bool) uint64 {
	y := x &^ highBits
	lower := y | 0x20*ones
	bits := (lower + 0x1f*ones) &^ (lower + 0x05*ones) // a-z, A-Z: 0x61 to 0x7a once lowered
	bits |= (y + 0x50*ones) &^ (y + 0x46*ones)         // 0-9: 0x30 to 0x39
	bits |= ^((y ^ 0x5f*ones) + 0x7f*ones)             // _: zero once xored with it
	if colon {
		bits |= ^((y ^ 0x3a*ones) + 0x7f*ones) // :
	}
	return bits &^ x & highBits
}

// validNameAt is ValidLabelName, or ValidMetricName when metric, of the n
// bytes of b at p. A name of one to eight bytes with eight bytes of b from
// it, nearly every label name, is checked here in one word, inlined into
// Scan; validLongName has the rest.
func validNameAt(b []byte, p, n int, metric bool) bool {
	if uint(n-1) >= 8 || len(b)-p < 8 {
		return validLongName(b, p, n, metric)
	}
	start := uint8(labelNameStart)
	if metric {
		start = metricNameStart
	}
	// The bytes after the name are read, but not looked at.
	want := uint64(highBits) >> (64 - 8*n)
	return nameClass[b[p]]&start != 0 && nameBits(binary.LittleEndian.Uint64(b[p:]), metric)&want == want
}

// validLongName is validNameAt of a name of more than eight bytes, or one
// too near the end of b to read a word from.
func validLongName(b []byte, p, n int, metric bool) bool {
	start, rest := uint8(labelNameStart), uint8(labelNameByte)
	if metric {
		start, rest = metricNameStart, metricNameByte
	}
	if n < 8 {
		return validName(unsafeString(b[p:p+n]), start, rest)
	}
	if nameClass[b[p]]&start == 0 {
		return false
	}
	// Words at p, p+8, ... and the last eight bytes, which may overlap the
	// word before them.
	for i := p; i < p+n-8; i += 8 {
		if nameBits(binary.LittleEndian.Uint64(b[i:]), metric) != highBits {
			return false
		}
	}
	return nameBits(binary.LittleEndian.Uint64(b[p+n-8:]), metric) == highBits
}

// isASCII reports whether every byte of b is below 0x80.
func isASCII(b []byte) bool {
	var acc uint64
	for ; len(b) >= 8; b = b[8:] {
		acc |= binary.LittleEndian.Uint64(b)
	}
	for _, c := range b {
		acc |= uint64(c)
	}
	return acc&highBits == 0
}
