package wire

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// The messages the consumer sends, written by hand: a PushRequest carries
// a Kafka record's value as it came, a PushBatch several of them in one
// stream message. The pusher reads them with Envelope and BatchEnvelope
// (envelope.go).

// PushRequest is the consumer's ferry.v1.PushRequest whose write_request
// is the Kafka record value as it came. An embedded message and a bytes
// field are the same on the wire, so the record's bytes go out without
// being marshalled again: the consumer reads a record only to validate it
// (ValidateWriteRequest). The proto/codec codec marshals it like any gogo
// message; the fields mirror the generated ferryv1.PushRequest.
type PushRequest struct {
	RequestID uint64
	Tenant    string
	Topic     string
	Partition int32
	Offset    int64
	Value     []byte // a remote-write WriteRequest, already validated
	Sequence  uint64
}

// Field numbers of ferry.v1.PushRequest, for PushRequest and Envelope.
const (
	fieldRequestID    protowire.Number = 1
	fieldTenant       protowire.Number = 2
	fieldTopic        protowire.Number = 3
	fieldPartition    protowire.Number = 4
	fieldOffset       protowire.Number = 5
	fieldWriteRequest protowire.Number = 6
	fieldSequence     protowire.Number = 7
)

// fieldBatchRequests is ferry.v1.PushBatchRequest's requests field, for
// PushBatch and BatchEnvelope.
const fieldBatchRequests protowire.Number = 1

// Size returns the encoded size.
func (r *PushRequest) Size() int {
	n := 0
	if r.RequestID != 0 {
		n += protowire.SizeTag(fieldRequestID) + protowire.SizeVarint(r.RequestID)
	}
	if r.Tenant != "" {
		n += protowire.SizeTag(fieldTenant) + protowire.SizeBytes(len(r.Tenant))
	}
	if r.Topic != "" {
		n += protowire.SizeTag(fieldTopic) + protowire.SizeBytes(len(r.Topic))
	}
	if r.Partition != 0 {
		n += protowire.SizeTag(fieldPartition) + protowire.SizeVarint(uint64(int64(r.Partition))) //nolint:gosec // proto3 int32 encoding sign-extends
	}
	if r.Offset != 0 {
		n += protowire.SizeTag(fieldOffset) + protowire.SizeVarint(uint64(r.Offset)) //nolint:gosec // proto3 int64 encoding
	}
	// write_request is non-nullable in the generated code, which always
	// writes it, even empty; so does this.
	n += protowire.SizeTag(fieldWriteRequest) + protowire.SizeBytes(len(r.Value))
	if r.Sequence != 0 {
		n += protowire.SizeTag(fieldSequence) + protowire.SizeVarint(r.Sequence)
	}
	return n
}

// MarshalToSizedBuffer writes the message into b, which must be exactly
// Size() bytes, in field order as the generated code does.
func (r *PushRequest) MarshalToSizedBuffer(b []byte) (int, error) {
	out := b[:0]
	if r.RequestID != 0 {
		out = protowire.AppendTag(out, fieldRequestID, protowire.VarintType)
		out = protowire.AppendVarint(out, r.RequestID)
	}
	if r.Tenant != "" {
		out = protowire.AppendTag(out, fieldTenant, protowire.BytesType)
		out = protowire.AppendString(out, r.Tenant)
	}
	if r.Topic != "" {
		out = protowire.AppendTag(out, fieldTopic, protowire.BytesType)
		out = protowire.AppendString(out, r.Topic)
	}
	if r.Partition != 0 {
		out = protowire.AppendTag(out, fieldPartition, protowire.VarintType)
		out = protowire.AppendVarint(out, uint64(int64(r.Partition))) //nolint:gosec // proto3 int32 encoding sign-extends
	}
	if r.Offset != 0 {
		out = protowire.AppendTag(out, fieldOffset, protowire.VarintType)
		out = protowire.AppendVarint(out, uint64(r.Offset)) //nolint:gosec // proto3 int64 encoding
	}
	out = protowire.AppendTag(out, fieldWriteRequest, protowire.BytesType)
	out = protowire.AppendBytes(out, r.Value)
	if r.Sequence != 0 {
		out = protowire.AppendTag(out, fieldSequence, protowire.VarintType)
		out = protowire.AppendVarint(out, r.Sequence)
	}
	if len(out) != len(b) || &out[0] != &b[0] {
		return 0, errors.New("wire: push request buffer of the wrong size")
	}
	return len(out), nil
}

// Unmarshal is never needed: the consumer only sends push requests, and
// the pusher reads them with Envelope.
func (r *PushRequest) Unmarshal([]byte) error {
	return errors.New("wire: a PushRequest is only sent; read one with Envelope")
}

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
