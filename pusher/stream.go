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

// readPush is a Push stream's reader: receive a request, admit it, hand
// it on, until the stream ends.
func readPush(st *stream) error {
	var env envelope
	for {
		if err := st.out.recv(st.ctx, &env); err != nil {
			return err
		}
		if err := st.admit(&env, true); err != nil {
			return err
		}
	}
}

// A stream is one Push or PushBatch call being served. Its reader
// (readPush, readBatches) receives requests, admits each through out and
// hands it to reqs; the handler's loop (serve) hands it on: a sequenced
// request to its tenant's queue (sequencer), any other to a goroutine of
// its own. Whoever applied a request gives its answer to out, counted.
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

// admit takes room for env's request (out.admit), decodes it and hands it
// to the handler's loop. first says that it is the first request of its
// message. It fails only when the stream's context ends.
func (st *stream) admit(env *envelope, first bool) error {
	cost, err := st.out.admit(st.ctx, len(env.WriteRequest), first)
	if err != nil {
		return err
	}
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
	return decoding{lim: s.cfg.Limits.wire(), scan: s.scan}
}
