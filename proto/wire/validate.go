package wire

import (
	"fmt"

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

// ValidateWriteRequest checks that b is a well-formed remote-write
// WriteRequest without building it: every field is walked, the fields the
// consumer's peers rely on must have their wire types, and every label,
// sample and nested message must be complete. A full decode costs about a
// thousand allocations for a 100-series request only to be thrown away;
// this costs none. It accepts everything the generated decoder accepts
// (asking the decoder itself when the walk fails); the
// few malformations only the generated decoder notices (such as a wrong
// wire type inside a histogram) are answered CLIENT_ERROR by the pusher,
// which reads each request's envelope before its write request. On top of
// the wire format it refuses what policy.go refuses for every reader: a
// series without labels, a remote-write 2.0 request, a snappy-compressed
// value; those errors wrap ErrRefused.
func ValidateWriteRequest(b []byte) error {
	if err := walkWriteRequest(b); err != nil {
		// The walk is stricter than the generated decoder in corners such
		// as deprecated groups in unknown fields; a value the decoder (the
		// pusher's) accepts must never be skipped, so it has the last word.
		var wr prompb.WriteRequest
		if wr.Unmarshal(b) != nil {
			return refuseSnappy(b, err)
		}
	}
	return checkPolicy(b)
}

// walkWriteRequest is the walk of ValidateWriteRequest, without the
// generated decoder's second opinion.
//
// The walkers below are written out per message rather than driven by one
// generic walk with a callback: on the consumer's hot path a call through a
// closure per field, and protowire's general parsing of every tag and
// length, cost more than the checks themselves. Each walker reads the
// encodings a conforming producer writes inline and hands anything else to
// nextField, which parses it exactly as protowire does.
func walkWriteRequest(b []byte) error {
	for len(b) > 0 {
		num, typ, v, n := nextShortField(b)
		if n == 0 {
			if num, typ, v, n = nextField(b); n < 0 {
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
		num, typ, v, n := nextShortField(b)
		if n == 0 {
			if num, typ, v, n = nextField(b); n < 0 {
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
		num, typ, _, n := nextField(b)
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
		num, typ, _, n := nextField(b)
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
		_, _, _, n := nextField(b)
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
