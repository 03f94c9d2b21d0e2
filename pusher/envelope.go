package pusher

import (
	"errors"
	"sync"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/wire"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// envelope is what the codec unmarshals a Push stream's request into: the
// envelope fields, and the write request still encoded (see wire.Envelope),
// which decode then decodes into pooled memory.
type envelope struct {
	wire.Envelope
}

// decode returns the request with its write request decoded into pooled
// memory (see pooledRequest), or, when it does not decode, the envelope
// fields alone and a client error naming why. The decoded request keeps
// the encoded bytes its strings point into; the envelope reads the next
// request into the buffer the pooled request had, so buffers circulate
// instead of being allocated.
//
// With d.scan, for a backend that takes requests as encoded (RawPusher),
// decode first tries wire.Decoder.Scan, and a request it vouches for is
// not decoded at all: its write request stays empty until Server.process
// finds that it must be decoded after all (see pooledRequest.scanned).
func (e *envelope) decode(d decoding) received {
	p := requestPool.Get().(*pooledRequest)
	p.buf, e.WriteRequest = e.WriteRequest, p.buf[:0]
	p.req = e.Request
	size := len(p.buf)
	p.dec.Limits = d.lim
	if d.scan != nil {
		if p.sum, p.scanned = p.dec.Scan(p.buf, *d.scan); p.scanned {
			return received{req: &p.req, size: size, owner: p}
		}
	}
	if err := p.decodeWriteRequest(); err != nil {
		p.release()
		req := e.Request // its own copy: the pooled one is gone
		return received{req: &req, size: size, bad: err}
	}
	return received{req: &p.req, size: size, owner: p}
}

// decodeWriteRequest decodes p's write request from its bytes, or returns
// the client error that answers a request that does not decode.
func (p *pooledRequest) decodeWriteRequest() *backend.ClientError {
	p.scanned = false
	if err := p.dec.Decode(p.buf, &p.req.WriteRequest); err != nil {
		what := "write_request is not a remote-write WriteRequest: "
		if errors.Is(err, wire.ErrRefused) {
			what = "write_request refused: "
		}
		return &backend.ClientError{Reason: what + err.Error(), Cause: err}
	}
	return nil
}

var errEnvelopeSend = errors.New("pusher: envelopes are only received")

// Size is never needed: envelopes are only received.
func (e *envelope) Size() int { return 0 }

// MarshalToSizedBuffer is never needed: envelopes are only received.
func (e *envelope) MarshalToSizedBuffer([]byte) (int, error) { return 0, errEnvelopeSend }

// maxPooledBytes bounds the encoded size of a request whose memory goes
// back to the pool. A rare huge request would otherwise pin its buffer and
// arrays for as long as the stream keeps the pool busy.
const maxPooledBytes = 4 << 20

// pooledRequest is a request read from a Push stream, with the memory its
// decoded write request points into. It belongs to that one request until
// release, which the stream calls once the answer is sent: the backend may
// look at the request only during Push (see Backend).
type pooledRequest struct {
	req ferryv1.PushRequest
	buf []byte // the encoded write request; strings of req point into it
	dec wire.Decoder
	// scanned says that wire.Decoder.Scan vouched for buf, which is not
	// decoded: req's write request is empty, and sum is what Scan found.
	scanned bool
	sum     wire.Summary
}

var requestPool = sync.Pool{New: func() any { return new(pooledRequest) }}

// release returns the request's memory to the pool. Nothing may use the
// request, its strings or its slices afterwards.
func (p *pooledRequest) release() {
	if cap(p.buf) > maxPooledBytes {
		return
	}
	p.req = ferryv1.PushRequest{}
	p.scanned = false
	requestPool.Put(p)
}
