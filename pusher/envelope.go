package pusher

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

// envelope receives a PushRequest from the stream in two steps: the
// envelope fields first, the write request second. A write request that
// does not decode is then one request's CLIENT_ERROR, answered by its
// request ID, instead of an error that ends the whole stream and makes the
// sender resend the same bytes forever.
type envelope struct {
	req          ferryv1.PushRequest
	writeRequest []byte // field 6, encoded
}

// Unmarshal reads the envelope fields and keeps the write request encoded.
// It copies what it keeps: the codec reuses b after the call.
func (e *envelope) Unmarshal(b []byte) error {
	e.req = ferryv1.PushRequest{}
	e.writeRequest = e.writeRequest[:0]
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("pusher: push request: %w", protowire.ParseError(n))
		}
		b = b[n:]
		n = e.field(num, typ, b)
		if n < 0 {
			return fmt.Errorf("pusher: push request field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return nil
}

// field consumes one field's value and returns its length, or a negative
// protowire error code. Unknown fields are skipped, as generated code does.
func (e *envelope) field(num protowire.Number, typ protowire.Type, b []byte) int {
	switch {
	case typ == protowire.VarintType && (num == 1 || num == 4 || num == 5 || num == 7):
		v, n := protowire.ConsumeVarint(b)
		switch num {
		case 7:
			e.req.Sequence = v
		case 1:
			e.req.RequestId = v
		case 4:
			e.req.Partition = int32(v) //nolint:gosec // proto3 int32 wire encoding
		case 5:
			e.req.Offset = int64(v) //nolint:gosec // proto3 int64 wire encoding
		}
		return n
	case typ == protowire.BytesType && (num == 2 || num == 3 || num == 6):
		v, n := protowire.ConsumeBytes(b)
		switch num {
		case 2:
			e.req.Tenant = string(v)
		case 3:
			e.req.Topic = string(v)
		case 6:
			// A message field seen twice merges, which for encoded
			// messages is concatenation.
			e.writeRequest = append(e.writeRequest, v...)
		}
		return n
	default:
		return protowire.ConsumeFieldValue(num, typ, b)
	}
}

// decode returns the request with its write request decoded into pooled
// memory (see pooledRequest), or, when it does not decode, the envelope
// fields alone and a client error naming why. The decoded request keeps
// the encoded bytes its strings point into; the envelope reads the next
// request into the buffer the pooled request had, so buffers circulate
// instead of being allocated.
func (e *envelope) decode() received {
	p := requestPool.Get().(*pooledRequest)
	p.buf, e.writeRequest = e.writeRequest, p.buf[:0]
	p.req = e.req
	size := len(p.buf)
	if err := p.dec.decode(p.buf, &p.req.WriteRequest); err != nil {
		p.release()
		req := e.req // its own copy: the pooled one is gone
		return received{req: &req, size: size, bad: &ClientError{
			Reason: "write_request is not a remote-write WriteRequest: " + err.Error(), Cause: err,
		}}
	}
	return received{req: &p.req, size: size, owner: p}
}

var errEnvelopeSend = errors.New("pusher: envelopes are only received")

// Size is never needed: envelopes are only received.
func (e *envelope) Size() int { return 0 }

// MarshalToSizedBuffer is never needed: envelopes are only received.
func (e *envelope) MarshalToSizedBuffer([]byte) (int, error) { return 0, errEnvelopeSend }
