package wire

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// fieldBatchRequests is ferry.v1.PushBatchRequest's requests field.
const fieldBatchRequests protowire.Number = 1

// PushBatch is the consumer's ferry.v1.PushBatchRequest: the requests of
// one PushBatch stream message, each written as PushRequest writes it, so a
// record's value is copied once, into the message, as on a Push stream.
// The proto/codec codec marshals it like any gogo message.
type PushBatch struct {
	Requests []*PushRequest
	// sizes are the encoded sizes of Requests, from the last Size call:
	// the codec sizes a message and then marshals it, and each request's
	// length prefix needs its size again.
	sizes []int
}

// Size returns the encoded size.
func (m *PushBatch) Size() int {
	m.sizes = m.sizes[:0]
	n := 0
	for _, r := range m.Requests {
		s := r.Size()
		m.sizes = append(m.sizes, s)
		n += protowire.SizeTag(fieldBatchRequests) + protowire.SizeBytes(s)
	}
	return n
}

// MarshalToSizedBuffer writes the message into b, which must be exactly
// Size() bytes, Size having been called since Requests last changed.
func (m *PushBatch) MarshalToSizedBuffer(b []byte) (int, error) {
	if len(m.sizes) != len(m.Requests) {
		return 0, errors.New("wire: push batch marshalled without its size")
	}
	off := 0
	for i, r := range m.Requests {
		s := m.sizes[i]
		head := protowire.AppendVarint(protowire.AppendTag(b[off:off], fieldBatchRequests, protowire.BytesType), uint64(s)) //nolint:gosec // sizes are not negative
		off += len(head)
		if off+s > len(b) {
			return 0, errors.New("wire: push batch buffer of the wrong size")
		}
		if _, err := r.MarshalToSizedBuffer(b[off : off+s]); err != nil {
			return 0, fmt.Errorf("wire: push batch request %d: %w", i, err)
		}
		off += s
	}
	if off != len(b) {
		return 0, errors.New("wire: push batch buffer of the wrong size")
	}
	return off, nil
}

// Unmarshal is never needed: the consumer only sends batches, and the
// pusher reads them with BatchEnvelope.
func (m *PushBatch) Unmarshal([]byte) error {
	return errors.New("wire: a PushBatch is only sent; read one with BatchEnvelope")
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
