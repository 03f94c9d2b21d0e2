package consumer

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ferrylabs/ferry/proto/prompb"
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
	err := walk(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch num {
		case 1:
			return nested("timeseries", typ, v, validateTimeSeries)
		case 3:
			return nested("metadata", typ, v, validateAny)
		}
		return nil
	})
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

func validateTimeSeries(b []byte) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch num {
		case 1:
			return nested("label", typ, v, validateLabel)
		case 2:
			return nested("sample", typ, v, validateSample)
		case 3:
			return nested("exemplar", typ, v, validateAny)
		case 4:
			return nested("histogram", typ, v, validateAny)
		}
		return nil
	})
}

func validateLabel(b []byte) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, _ []byte) error {
		if (num == 1 || num == 2) && typ != protowire.BytesType {
			return fmt.Errorf("label field %d has wire type %d, want bytes", num, typ)
		}
		return nil
	})
}

func validateSample(b []byte) error {
	return walk(b, func(num protowire.Number, typ protowire.Type, _ []byte) error {
		switch {
		case num == 1 && typ != protowire.Fixed64Type:
			return fmt.Errorf("sample value has wire type %d, want fixed64", typ)
		case num == 2 && typ != protowire.VarintType:
			return fmt.Errorf("sample timestamp has wire type %d, want varint", typ)
		}
		return nil
	})
}

// validateAny checks only that b is a sequence of complete fields.
func validateAny(b []byte) error {
	return walk(b, func(protowire.Number, protowire.Type, []byte) error { return nil })
}

// nested checks that an embedded message field has the bytes wire type and
// validates its content.
func nested(what string, typ protowire.Type, v []byte, validate func([]byte) error) error {
	if typ != protowire.BytesType {
		return fmt.Errorf("%s has wire type %d, want an embedded message", what, typ)
	}
	if err := validate(v); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// walk calls fn for every field of b with the field's value: the content of
// a bytes field, the encoded value otherwise. It fails on a truncated or
// malformed field, as a decoder would.
func walk(b []byte, fn func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(m))
		}
		v := b[n : n+m]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v)
		}
		if err := fn(num, typ, v); err != nil {
			return err
		}
		b = b[n+m:]
	}
	return nil
}
