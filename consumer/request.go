package consumer

import (
	"errors"

	"google.golang.org/protobuf/encoding/protowire"
)

// pushRequest is the wire form of a ferry.v1.PushRequest whose
// write_request is the Kafka record value as it came. An embedded message
// and a bytes field are the same on the wire, so the record's bytes go out
// without being marshalled again: the consumer decodes a record only to
// validate it. The proto/codec codec marshals it like any gogo message.
type pushRequest struct {
	requestID uint64
	tenant    string
	topic     string
	partition int32
	offset    int64
	value     []byte // a remote-write WriteRequest, already validated
	sequence  uint64
}

// Field numbers of ferry.v1.PushRequest.
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
func (r *pushRequest) Size() int {
	n := 0
	if r.requestID != 0 {
		n += protowire.SizeTag(fieldRequestID) + protowire.SizeVarint(r.requestID)
	}
	if r.tenant != "" {
		n += protowire.SizeTag(fieldTenant) + protowire.SizeBytes(len(r.tenant))
	}
	if r.topic != "" {
		n += protowire.SizeTag(fieldTopic) + protowire.SizeBytes(len(r.topic))
	}
	if r.partition != 0 {
		n += protowire.SizeTag(fieldPartition) + protowire.SizeVarint(uint64(int64(r.partition))) //nolint:gosec // proto3 int32 encoding sign-extends
	}
	if r.offset != 0 {
		n += protowire.SizeTag(fieldOffset) + protowire.SizeVarint(uint64(r.offset)) //nolint:gosec // proto3 int64 encoding
	}
	// write_request is non-nullable in the generated code, which always
	// writes it, even empty; so does this.
	n += protowire.SizeTag(fieldWriteRequest) + protowire.SizeBytes(len(r.value))
	if r.sequence != 0 {
		n += protowire.SizeTag(fieldSequence) + protowire.SizeVarint(r.sequence)
	}
	return n
}

// MarshalToSizedBuffer writes the message into b, which must be exactly
// Size() bytes, in field order as the generated code does.
func (r *pushRequest) MarshalToSizedBuffer(b []byte) (int, error) {
	out := b[:0]
	if r.requestID != 0 {
		out = protowire.AppendTag(out, fieldRequestID, protowire.VarintType)
		out = protowire.AppendVarint(out, r.requestID)
	}
	if r.tenant != "" {
		out = protowire.AppendTag(out, fieldTenant, protowire.BytesType)
		out = protowire.AppendString(out, r.tenant)
	}
	if r.topic != "" {
		out = protowire.AppendTag(out, fieldTopic, protowire.BytesType)
		out = protowire.AppendString(out, r.topic)
	}
	if r.partition != 0 {
		out = protowire.AppendTag(out, fieldPartition, protowire.VarintType)
		out = protowire.AppendVarint(out, uint64(int64(r.partition))) //nolint:gosec // proto3 int32 encoding sign-extends
	}
	if r.offset != 0 {
		out = protowire.AppendTag(out, fieldOffset, protowire.VarintType)
		out = protowire.AppendVarint(out, uint64(r.offset)) //nolint:gosec // proto3 int64 encoding
	}
	out = protowire.AppendTag(out, fieldWriteRequest, protowire.BytesType)
	out = protowire.AppendBytes(out, r.value)
	if r.sequence != 0 {
		out = protowire.AppendTag(out, fieldSequence, protowire.VarintType)
		out = protowire.AppendVarint(out, r.sequence)
	}
	if len(out) != len(b) || &out[0] != &b[0] {
		return 0, errors.New("consumer: push request buffer of the wrong size")
	}
	return len(out), nil
}

// Unmarshal is never needed: the consumer only sends push requests.
func (r *pushRequest) Unmarshal([]byte) error {
	return errors.New("consumer: push requests are not decoded by the consumer")
}
