package consumer

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// Tags of the fields the walk meets millions of times a second, as their
// one-byte encodings: (number << 3) | wire type.
const (
	tagLabelName  = 1<<3 | byte(protowire.BytesType)
	tagLabelValue = 2<<3 | byte(protowire.BytesType)
	tagSampleVal  = 1<<3 | byte(protowire.Fixed64Type)
	tagSampleTime = 2<<3 | byte(protowire.VarintType)
)

// validateWriteRequest checks that b is a well-formed remote-write
// WriteRequest without building it: every field is walked, the fields the
// consumer's peers rely on must have their wire types, and every label,
// sample and nested message must be complete. A full decode costs about a
// thousand allocations for a 100-series request only to be thrown away;
// this costs none. It accepts everything the generated decoder accepts
// (asking the decoder itself when the walk fails); the
// few malformations only the generated decoder notices (such as a wrong
// wire type inside a histogram) are answered CLIENT_ERROR by the pusher,
// which reads each request's envelope before its write request.
func validateWriteRequest(b []byte) error {
	err := walkWriteRequest(b)
	if err == nil {
		return nil
	}
	// The walk is stricter than the generated decoder in corners such as
	// deprecated groups in unknown fields; a value the decoder (the
	// pusher's) accepts must never be skipped, so it has the last word.
	var wr prompb.WriteRequest
	if wr.Unmarshal(b) == nil {
		return nil
	}
	return err
}

// walkWriteRequest is the walk of validateWriteRequest, without the
// generated decoder's second opinion.
//
// The walkers below are written out per message rather than driven by one
// generic walk with a callback: on the consumer's hot path a call through a
// closure per field, and protowire's general parsing of every tag and
// length, cost more than the checks themselves. Each walker reads the
// encodings a conforming producer writes inline and hands anything else to
// field, which parses it exactly as protowire does.
func walkWriteRequest(b []byte) error {
	for len(b) > 0 {
		num, typ, v, n := shortField(b)
		if n == 0 {
			if num, typ, v, n = field(b); n < 0 {
				return fieldError(b)
			}
		}
		switch num {
		case 1:
			if typ != protowire.BytesType {
				return notEmbedded("timeseries", typ)
			}
			if err := validateTimeSeries(v); err != nil {
				return within("timeseries", err)
			}
		case 3:
			if typ != protowire.BytesType {
				return notEmbedded("metadata", typ)
			}
			if err := validateAny(v); err != nil {
				return within("metadata", err)
			}
		}
		b = b[n:]
	}
	return nil
}

// seriesFields names the fields of a TimeSeries, by number, as errors say
// them.
var seriesFields = [...]string{1: "label", 2: "sample", 3: "exemplar", 4: "histogram"}

// validateTimeSeries checks a TimeSeries: its labels and samples in full,
// its exemplars and histograms as sequences of complete fields.
func validateTimeSeries(b []byte) error {
	for len(b) > 0 {
		num, typ, v, n := shortField(b)
		if n == 0 {
			if num, typ, v, n = field(b); n < 0 {
				return fieldError(b)
			}
		}
		if num >= 1 && num <= 4 {
			what := seriesFields[num]
			if typ != protowire.BytesType {
				return notEmbedded(what, typ)
			}
			var err error
			switch num {
			case 1:
				err = validateLabel(v)
			case 2:
				err = validateSample(v)
			default:
				err = validateAny(v)
			}
			if err != nil {
				return within(what, err)
			}
		}
		b = b[n:]
	}
	return nil
}

// validateLabel checks that a Label's name and value have the bytes wire
// type. Their content is not looked at: the generated decoder accepts any
// bytes, and the pusher judges names and UTF-8 series by series, so a bad
// label is the pusher's to answer, not a reason to skip the record.
func validateLabel(b []byte) error {
	for len(b) > 0 {
		// A name or value shorter than 128 bytes: a one-byte tag and a
		// one-byte length that b holds.
		if len(b) >= 2 && (b[0] == tagLabelName || b[0] == tagLabelValue) && b[1] < 0x80 && int(b[1]) <= len(b)-2 {
			b = b[2+int(b[1]):]
			continue
		}
		num, typ, _, n := field(b)
		if n < 0 {
			return fieldError(b)
		}
		if (num == 1 || num == 2) && typ != protowire.BytesType {
			return fmt.Errorf("label field %d has wire type %d, want bytes", num, typ)
		}
		b = b[n:]
	}
	return nil
}

// validateSample checks that a Sample's value is a fixed64 and its
// timestamp a varint.
func validateSample(b []byte) error {
	for len(b) > 0 {
		switch {
		case b[0] == tagSampleVal && len(b) >= 9:
			b = b[9:]
			continue
		case b[0] == tagSampleTime:
			if _, m := protowire.ConsumeVarint(b[1:]); m > 0 {
				b = b[1+m:]
				continue
			}
		}
		num, typ, _, n := field(b)
		switch {
		case n < 0:
			return fieldError(b)
		case num == 1 && typ != protowire.Fixed64Type:
			return fmt.Errorf("sample value has wire type %d, want fixed64", typ)
		case num == 2 && typ != protowire.VarintType:
			return fmt.Errorf("sample timestamp has wire type %d, want varint", typ)
		}
		b = b[n:]
	}
	return nil
}

// validateAny checks only that b is a sequence of complete fields.
func validateAny(b []byte) error {
	for len(b) > 0 {
		_, _, _, n := field(b)
		if n < 0 {
			return fieldError(b)
		}
		b = b[n:]
	}
	return nil
}

// notEmbedded says that a field the walk descends into does not have the
// wire type of an embedded message.
func notEmbedded(what string, typ protowire.Type) error {
	return fmt.Errorf("%s has wire type %d, want an embedded message", what, typ)
}

// within prefixes the error of an embedded message with the field's name,
// so that the error says where in the request the fault is.
func within(what string, err error) error {
	return fmt.Errorf("%s: %w", what, err)
}

// shortField is the inlined fast path of field: it splits off b a bytes
// field whose tag and length take one byte each, as the labels, samples and
// most series of a request do, and returns n = 0 for any other field.
func shortField(b []byte) (num protowire.Number, typ protowire.Type, v []byte, n int) {
	if len(b) < 2 || b[0] < 8 || b[0] >= 0x80 || b[0]&7 != byte(protowire.BytesType) || b[1] >= 0x80 || int(b[1]) > len(b)-2 {
		return 0, 0, nil, 0
	}
	return protowire.Number(b[0] >> 3), protowire.BytesType, b[2 : 2+int(b[1])], 2 + int(b[1])
}

// field splits the first field off b: its number, its wire type, its value
// (the content of a bytes field, the encoded value otherwise) and the
// number of bytes it takes. n < 0 means the field is truncated or
// malformed, exactly when protowire.ConsumeTag or ConsumeFieldValue would
// say so; fieldError then says how.
//
// One-byte tags (every field number below 16, so every field of a
// remote-write request) and one- and two-byte lengths are read here; longer
// varints are protowire's, and so are groups, rare and recursive.
func field(b []byte) (num protowire.Number, typ protowire.Type, v []byte, n int) {
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

// fieldError says why field refused the first field of b. It parses the
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
