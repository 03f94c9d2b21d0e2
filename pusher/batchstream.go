package pusher

import (
	"sync"

	"google.golang.org/grpc"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/wire"
)

// PushBatch serves a stream whose messages carry several requests each
// (see the proto). Every request goes through exactly what a Push
// stream's does, the stream's slot and the server's bytes, decoding,
// the sequencer and its batches, the answer's counting; only the framing
// differs: a message's requests are read one after the other, and the
// answers ready at the moment go out together in one message.
func (s *Server) PushBatch(stream ferryv1.PusherService_PushBatchServer) error {
	out := newBatchSender(stream)
	err := s.serve(stream, receiveBatches, out.send)
	out.close()
	return err
}

func pushBatchHandler(srv any, stream grpc.ServerStream) error {
	return srv.(*Server).PushBatch(pushBatchStream{stream})
}

// pushBatchStream is a PushBatch stream as PusherService_PushBatchServer.
// The server reads and writes its messages with RecvMsg and SendMsg (see
// receiveBatches, batchSender); Send and Recv complete the interface.
type pushBatchStream struct{ grpc.ServerStream }

func (x pushBatchStream) Send(m *ferryv1.PushBatchResponse) error { return x.SendMsg(m) }

func (x pushBatchStream) Recv() (*ferryv1.PushBatchRequest, error) {
	m := new(ferryv1.PushBatchRequest)
	if err := x.RecvMsg(m); err != nil {
		return nil, err
	}
	return m, nil
}

// batchEnvelope is what the codec unmarshals a PushBatch message into: the
// envelope of each request, its write request still encoded.
type batchEnvelope struct {
	wire.BatchEnvelope
}

// Size is never needed: batch envelopes are only received.
func (e *batchEnvelope) Size() int { return 0 }

// MarshalToSizedBuffer is never needed: batch envelopes are only received.
func (e *batchEnvelope) MarshalToSizedBuffer([]byte) (int, error) { return 0, errEnvelopeSend }

// receiveBatches is receive for PushBatch: each request of a message takes
// its slot and its bytes, and is decoded, as if it had come alone. The
// first slot is taken before the message is read, so a stream at its
// bound is not read at all; the message's other requests then wait for
// theirs, already read, which the bound on a message's size keeps small.
func receiveBatches(stream grpc.ServerStream, hold *streamHold, lim wire.Limits, reqs chan<- received, errc chan<- error) {
	ctx := stream.Context()
	var msg batchEnvelope
	var env envelope
	for {
		if !hold.take(ctx) {
			errc <- ctx.Err()
			return
		}
		if err := stream.RecvMsg(&msg); err != nil {
			hold.give()
			errc <- err
			return
		}
		if msg.Len() == 0 {
			hold.give()
			continue
		}
		for i := range msg.Len() {
			if i > 0 && !hold.take(ctx) {
				errc <- ctx.Err()
				return
			}
			// decode swaps the envelope's buffer for a pooled one, which
			// the message's envelope keeps to read a later request into.
			e := msg.At(i)
			env.Envelope = *e
			err := admit(ctx, hold, lim, &env, reqs)
			e.WriteRequest = env.WriteRequest
			if err != nil {
				errc <- err
				return
			}
		}
	}
}

// maxAnswersPerMessage bounds the answers of one PushBatchResponse, so
// that a message stays far below any receiver's message size limit even
// when every answer quotes a long reason.
const maxAnswersPerMessage = 1024

// batchSender sends a PushBatch stream's answers: whatever is ready when
// it gets to send goes in one message, so answers that come while a
// message is being written share the next one, and an answer never waits
// for others to come.
type batchSender struct {
	stream grpc.ServerStream

	mu    sync.Mutex
	queue []readyAnswer
	wake  chan struct{} // a send since the sender last looked at queue
	stop  chan struct{} // closed by close: send what is left and end
	done  chan struct{} // closed once the sender ended
}

// readyAnswer is an answer waiting to be sent, with its request, recycled
// once the answer is encoded: the answer's reason may quote its memory.
type readyAnswer struct {
	r    received
	resp *ferryv1.PushResponse
}

func newBatchSender(stream grpc.ServerStream) *batchSender {
	b := &batchSender{stream: stream, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go b.run()
	return b
}

// send queues an answer for the next message.
func (b *batchSender) send(r received, resp *ferryv1.PushResponse) {
	b.mu.Lock()
	b.queue = append(b.queue, readyAnswer{r: r, resp: resp})
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// close sends the answers still queued and returns once the sender ended.
// Nothing may call send afterwards.
func (b *batchSender) close() {
	close(b.stop)
	<-b.done
}

func (b *batchSender) run() {
	defer close(b.done)
	var (
		spare   []readyAnswer
		msg     ferryv1.PushBatchResponse
		sendErr error
	)
	for {
		stopping := false
		select {
		case <-b.wake:
		case <-b.stop:
			stopping = true
		}
		for {
			b.mu.Lock()
			ready := b.queue
			b.queue = spare[:0]
			b.mu.Unlock()
			if len(ready) == 0 {
				spare = ready
				break
			}
			for start := 0; start < len(ready); start += maxAnswersPerMessage {
				part := ready[start:min(start+maxAnswersPerMessage, len(ready))]
				msg.Responses = msg.Responses[:0]
				for _, a := range part {
					msg.Responses = append(msg.Responses, a.resp)
				}
				// After a failed send the stream is ending: the answers
				// are only recycled, as Push does.
				if sendErr == nil {
					sendErr = b.stream.SendMsg(&msg)
				}
			}
			for i, a := range ready {
				a.r.recycle()
				ready[i] = readyAnswer{}
			}
			clear(msg.Responses)
			spare = ready
		}
		if stopping {
			return
		}
	}
}
