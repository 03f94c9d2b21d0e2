package pusher

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/wire"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// Push serves one consumer's stream of one request per message. Requests
// are applied concurrently and each answer is sent, in a message of its
// own, as soon as its request is done. Sequenced requests
// (PushRequest.sequence set) of one tenant are applied one at a time in the
// order received, which lets the consumer keep several of a tenant's
// requests in flight; unsequenced ones (grpcurl) are applied as they come.
func (s *Server) Push(stream ferryv1.PusherService_PushServer) error {
	return s.serve(stream, newPushOutbox(stream, s.newRoom()), readPush)
}

// newPushOutbox is a Push stream's outbox: each answer goes in a message
// of its own, and none is held.
func newPushOutbox(stream grpc.ServerStream, room *streamHold) *outbox {
	return newOutbox(stream, room, func(ready []readyAnswer) error {
		for _, a := range ready {
			if err := stream.SendMsg(a.resp); err != nil {
				return err
			}
		}
		return nil
	}, false)
}

// PushBatch serves a stream whose messages carry several requests each
// (see the proto). Every request goes through exactly what a Push
// stream's does, the stream's slot and the server's bytes, decoding,
// the sequencer and its batches, the answer's counting; only the framing
// differs: a message's requests are read one after the other, and the
// answers ready at the moment go out together in one message, those that
// become ready while the reader decodes a message's requests at its next
// wait (see outbox).
func (s *Server) PushBatch(stream ferryv1.PusherService_PushBatchServer) error {
	return s.serve(stream, newBatchOutbox(stream, s.newRoom()), readBatches)
}

// newBatchOutbox is a PushBatch stream's outbox: it holds answers while
// the reader decodes, and writes them in as few messages as the bound on
// a message allows.
func newBatchOutbox(stream grpc.ServerStream, room *streamHold) *outbox {
	var msg ferryv1.PushBatchResponse
	return newOutbox(stream, room, func(ready []readyAnswer) error {
		return writeBatches(stream, &msg, ready)
	}, true)
}

// A stream is one Push or PushBatch call being served. Its reader
// (readPush, readBatches, beside the outbox) receives requests, admits
// each through out, and hands it to reqs decoded (handOn); the handler's
// loop (serve) hands it on: a sequenced request to its tenant's queue
// (sequencer), any other to a goroutine of its own. Whoever applied a
// request gives its answer to out, counted. Here too is how a request is
// decoded, into pooled memory (envelope, pooledRequest).
type stream struct {
	ctx      context.Context
	applier  *applier
	dec      decoding
	out      *outbox
	seq      *sequencer
	reqs     chan received  // from the reader to the handler's loop
	applying sync.WaitGroup // the goroutines of unsequenced requests
}

// serve runs a stream: its reader in a goroutine of its own, and the
// handler's loop, which hands on what the reader admitted until the reader
// ends or the server drains, then answers what is being applied. The
// reader cannot be the handler: gRPC ends a blocked read only once the
// handler returns, and a drain must end the stream while a read blocks.
// Handing requests over costs a goroutine switch each, which spreads a
// message's admission over time and lets more answers share a message
// (with the reader handing on itself, PushBatch took a third more CPU per
// request in BenchmarkPushBatchStream).
func (s *Server) serve(gs grpc.ServerStream, out *outbox, read func(*stream) error) error {
	if !s.enterStream() {
		return status.Error(codes.Unavailable, "pusher: shutting down")
	}
	defer s.streams.Done()
	// Headers first: the consumer treats them as proof the stream is open.
	if err := gs.SendHeader(nil); err != nil {
		return err
	}
	st := s.newStream(gs.Context(), out)
	// Last, end sends what is still held and keeps the reader, which may
	// outlive the handler, from sending after it.
	defer out.end()
	defer st.close()
	readErr := make(chan error, 1)
	go func() { readErr <- read(st) }()
	for {
		select {
		case r := <-st.reqs:
			st.handle(r)
		case err := <-readErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-s.stopping:
			// The consumer resends anything it did not get an answer for.
			return status.Error(codes.Unavailable, "pusher: shutting down")
		}
	}
}

func (s *Server) newStream(ctx context.Context, out *outbox) *stream {
	st := &stream{ctx: ctx, applier: s.applier, dec: s.decoding(), out: out, reqs: make(chan received)}
	st.seq = newSequencer(ctx, s.applier.applyTenant, s.applier.unapplied, st.answer, s.applier.batchRequests(), s.cfg.MaxBatchBytes)
	return st
}

// newRoom is a new stream's share of what the server holds unanswered.
func (s *Server) newRoom() *streamHold {
	return newStreamHold(s.cfg.MaxPendingPerStream, s.pending)
}

// handOn decodes env's request, which holds a slot of the stream and cost
// bytes of the server's (outbox.admit), and hands it to the handler's
// loop. It fails only when the stream's context ends.
func (st *stream) handOn(env *envelope, cost int64) error {
	r := env.decode(st.dec)
	r.hold, r.cost = st.out.room, cost
	select {
	case st.reqs <- r:
		return nil
	case <-st.ctx.Done(): // the handler returned
		r.recycle()
		return st.ctx.Err()
	}
}

// handle queues a sequenced request behind its tenant's, and applies any
// other in a goroutine of its own.
func (st *stream) handle(r received) {
	if r.req.Sequence != 0 {
		st.seq.enqueue(r)
		return
	}
	st.applying.Go(func() { st.answer([]received{r}, []answered{st.applier.handleRecovered(st.ctx, r)}) })
}

// answer counts the answers of rs, as[i] that of rs[i], and sends them.
// It is the stream's sendFunc.
func (st *stream) answer(rs []received, as []answered) {
	for i, r := range rs {
		st.applier.settle(r.req, as[i])
	}
	st.out.send(rs, as)
}

// close returns once every request handed on is answered. The handler's
// loop calls it once it hands on nothing more.
func (st *stream) close() {
	st.applying.Wait()
	st.seq.wait()
}

// sendFunc sends the answers of a stream's requests, as[i].resp that of
// rs[i], and recycles the requests. The answers it is given together are
// ready together: a stream that can carry several in one message does.
type sendFunc func(rs []received, as []answered)

// decoding is how a stream's requests are decoded: under the limits, and
// first by wire.Decoder.Scan when the backend takes them as encoded.
type decoding struct {
	lim  wire.Limits
	scan *wire.LabelRules // Server.scan
}

// decoding returns how the server's streams decode requests.
func (s *Server) decoding() decoding {
	return decoding{lim: s.cfg.Limits.Wire(), scan: s.scan}
}

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

// batchEnvelope is what the codec unmarshals a PushBatch message into: the
// envelope of each request, its write request still encoded.
type batchEnvelope struct {
	wire.BatchEnvelope
}

// Size is never needed: batch envelopes are only received.
func (e *batchEnvelope) Size() int { return 0 }

// MarshalToSizedBuffer is never needed: batch envelopes are only received.
func (e *batchEnvelope) MarshalToSizedBuffer([]byte) (int, error) { return 0, errEnvelopeSend }

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
