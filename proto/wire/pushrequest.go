package wire

import (
	"errors"

	"google.golang.org/protobuf/encoding/protowire"
)

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
