package wire

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

// The messages the pusher receives, read by hand: Envelope reads a
// PushRequest, BatchEnvelope a PushBatchRequest, each request's write
// request kept encoded for a Decoder.

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

// BatchEnvelope reads a ferry.v1.PushBatchRequest as Envelope reads a
// PushRequest: each request's envelope fields now, its write request kept
// encoded for a Decoder, so that a write request that does not decode is
// its own request's CLIENT_ERROR. The envelopes and their buffers are
// reused from one message to the next.
type BatchEnvelope struct {
	// Envelopes holds the message's requests, in order; only the first
	// Len are this message's.
	Envelopes []Envelope
	n         int
}

// Len returns the number of requests of the last message read.
func (m *BatchEnvelope) Len() int { return m.n }

// At returns the i-th request of the last message read. Its write request
// buffer may be swapped for another of the same use (see pusher's
// envelope.decode); the next Unmarshal reuses whatever it holds.
func (m *BatchEnvelope) At(i int) *Envelope { return &m.Envelopes[i] }

// Unmarshal reads the requests of b, copying what it keeps: the codec
// reuses b after the call. Unknown fields, and a requests field of another
// wire type, are skipped as generated code would; a malformed message or
// request is refused whole, as a malformed PushRequest ends a Push stream.
func (m *BatchEnvelope) Unmarshal(b []byte) error {
	m.n = 0
	for len(b) > 0 {
		num, typ, v, n := nextField(b)
		if n < 0 {
			return fmt.Errorf("wire: push batch: %w", fieldError(b))
		}
		b = b[n:]
		if num != fieldBatchRequests || typ != protowire.BytesType {
			continue
		}
		if m.n == len(m.Envelopes) {
			m.Envelopes = append(m.Envelopes, Envelope{})
		}
		if err := m.Envelopes[m.n].Unmarshal(v); err != nil {
			return fmt.Errorf("wire: push batch request %d: %w", m.n, err)
		}
		m.n++
	}
	return nil
}
