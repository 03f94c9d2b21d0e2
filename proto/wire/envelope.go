package wire

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

// Envelope reads a ferry.v1.PushRequest in two steps: the envelope fields
// now, the write request later (with a Decoder). A write request that does
// not decode is then one request's CLIENT_ERROR, answered by its request
// ID, instead of an error that ends the whole stream and makes the sender
// resend the same bytes forever.
type Envelope struct {
	// Request holds the envelope fields; its WriteRequest stays empty.
	Request ferryv1.PushRequest
	// WriteRequest is field 6, still encoded.
	WriteRequest []byte
}

// Unmarshal reads the envelope fields of b and keeps the write request
// encoded, reusing the memory of WriteRequest. It copies what it keeps:
// the codec reuses b after the call. Unknown fields are skipped, as
// generated code does, and b is refused exactly where protowire would
// refuse it.
func (e *Envelope) Unmarshal(b []byte) error {
	e.Request = ferryv1.PushRequest{}
	e.WriteRequest = e.WriteRequest[:0]
	for len(b) > 0 {
		num, typ, v, n := nextField(b)
		if n < 0 {
			return fmt.Errorf("wire: push request: %w", fieldError(b))
		}
		e.set(num, typ, v)
		b = b[n:]
	}
	return nil
}

// set stores the field num of wire type typ and value v, which nextField
// returned: the content of a bytes field, the encoding of a varint.
// A known field with an unexpected wire type is skipped like an unknown
// one, as the envelope has always done.
func (e *Envelope) set(num protowire.Number, typ protowire.Type, v []byte) {
	switch typ {
	case protowire.VarintType:
		x, _ := protowire.ConsumeVarint(v)
		switch num {
		case fieldRequestID:
			e.Request.RequestId = x
		case fieldPartition:
			e.Request.Partition = int32(x) //nolint:gosec // proto3 int32 wire encoding
		case fieldOffset:
			e.Request.Offset = int64(x) //nolint:gosec // proto3 int64 wire encoding
		case fieldSequence:
			e.Request.Sequence = x
		}
	case protowire.BytesType:
		switch num {
		case fieldTenant:
			e.Request.Tenant = string(v)
		case fieldTopic:
			e.Request.Topic = string(v)
		case fieldWriteRequest:
			// A message field seen twice merges, which for encoded
			// messages is concatenation.
			e.WriteRequest = append(e.WriteRequest, v...)
		}
	}
}
