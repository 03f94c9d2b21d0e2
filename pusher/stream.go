package pusher

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferrylabs/ferry/proto/wire"
)

// readFunc reads a stream's requests until it ends (receive): it hands
// each to reqs and the error that ended the stream to errc.
type readFunc func(stream grpc.ServerStream, hold *streamHold, dec decoding, reqs chan<- received, errc chan<- error)

// answerHold is a stream's answers held by its reader (batchSender): hold
// keeps the answers that become ready queued, release sends them.
type answerHold interface {
	hold()
	release()
}

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

// sendFunc sends the answers of a stream's requests, as[i].resp that of
// rs[i], and recycles the requests. The answers it is given together are
// ready together: a stream that can carry several in one message does.
type sendFunc func(rs []received, as []answered)

// serve is the loop of a stream, Push's or PushBatch's: read reads its
// requests, and send sends the answers once counted. Every answer is given
// to send before serve returns.
func (s *Server) serve(stream grpc.ServerStream, read readFunc, send sendFunc) error {
	if !s.enterStream() {
		return status.Error(codes.Unavailable, "pusher: shutting down")
	}
	defer s.streams.Done()
	ctx := stream.Context()
	// Headers first: the consumer treats them as proof the stream is open.
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	reqs := make(chan received)
	recvErr := make(chan error, 1)
	hold := newStreamHold(s.cfg.MaxPendingPerStream, s.pending)
	go read(stream, hold, s.decoding(), reqs, recvErr)

	answer := func(rs []received, as []answered) {
		for i, r := range rs {
			s.settle(r.req, as[i])
		}
		send(rs, as)
	}
	seq := newSequencer(ctx, s.applyTenant, s.unapplied, answer, s.batchRequests(), s.cfg.MaxBatchBytes)
	var applying sync.WaitGroup
	wait := func() {
		applying.Wait()
		seq.wait()
	}
	defer wait()
	for {
		select {
		case r := <-reqs:
			if r.req.Sequence != 0 {
				seq.enqueue(r)
				continue
			}
			applying.Go(func() { answer([]received{r}, []answered{s.handle(ctx, r)}) })
		case err := <-recvErr:
			wait()
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-s.stopping:
			// Answer what is being applied, then end the stream: the
			// consumer resends anything it did not get an answer for.
			wait()
			return status.Error(codes.Unavailable, "pusher: shutting down")
		}
	}
}

// admit hands a request read from a stream to reqs, decoded once the
// server has room for its bytes. The stream's slot for it is taken; admit
// gives it back when it fails, which it does only when ctx ends. A reader
// that holds answers passes held (else nil): admit lets go of them before
// it waits for room, since room comes back only as answers are sent, and
// holds again once it has room.
func admit(ctx context.Context, hold *streamHold, dec decoding, env *envelope, reqs chan<- received, held answerHold) error {
	cost := hold.server.cost(len(env.WriteRequest))
	if !hold.server.tryAcquire(cost) {
		if held != nil {
			held.release()
		}
		if err := hold.server.acquire(ctx, cost); err != nil {
			hold.give()
			return err
		}
		if held != nil {
			held.hold()
		}
	}
	r := env.decode(dec)
	r.hold, r.cost = hold, cost
	select {
	case reqs <- r:
		return nil
	case <-ctx.Done():
		r.recycle()
		return ctx.Err()
	}
}
