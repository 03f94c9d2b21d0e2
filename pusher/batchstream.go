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
	return s.serve(stream, receiveBatches, newBatchSender(stream).send)
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
func receiveBatches(stream grpc.ServerStream, hold *streamHold, dec decoding, reqs chan<- received, errc chan<- error) {
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
			err := admit(ctx, hold, dec, &env, reqs)
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

// batchSender sends a PushBatch stream's answers. The goroutine that has
// answers sends them itself unless another is sending; then it queues them
// and returns, and the sending one, once its message is written, sends
// everything queued meanwhile in one message, until the queue is empty. So
// an answer never waits for others to come, the answers given in one call
// (an apply call's) go in one message, answers that come while a message
// is written share the next one, and no goroutine is woken to send (a
// hand-off per answer cost more than the send).
type batchSender struct {
	stream grpc.ServerStream

	mu      sync.Mutex
	queue   []readyAnswer
	sending bool // a goroutine is sending; the fields below are its own
	spare   []readyAnswer
	msg     ferryv1.PushBatchResponse
	sendErr error
}

// readyAnswer is an answer waiting to be sent, with its request, recycled
// once the answer is encoded: the answer's reason may quote its memory.
type readyAnswer struct {
	r    received
	resp *ferryv1.PushResponse
}

func newBatchSender(stream grpc.ServerStream) *batchSender {
	return &batchSender{stream: stream}
}

// send sends the answers of rs, with whatever else is queued, or queues
// them for the goroutine sending now. It returns once they are sent or
// queued. It is the stream's sendFunc.
func (b *batchSender) send(rs []received, as []answered) {
	b.mu.Lock()
	for i, r := range rs {
		b.queue = append(b.queue, readyAnswer{r: r, resp: as[i].resp})
	}
	if b.sending {
		b.mu.Unlock()
		return
	}
	b.sending = true
	for len(b.queue) > 0 {
		ready := b.queue
		b.queue = b.spare[:0]
		b.mu.Unlock()
		b.write(ready)
		b.mu.Lock()
		b.spare = ready[:0]
	}
	b.sending = false
	b.mu.Unlock()
}

// write sends ready in as few messages as the bound allows, then recycles
// the requests. After a failed send the stream is ending: the answers are
// only recycled, as Push does.
func (b *batchSender) write(ready []readyAnswer) {
	for start := 0; start < len(ready); start += maxAnswersPerMessage {
		part := ready[start:min(start+maxAnswersPerMessage, len(ready))]
		b.msg.Responses = b.msg.Responses[:0]
		for _, a := range part {
			b.msg.Responses = append(b.msg.Responses, a.resp)
		}
		if b.sendErr == nil {
			b.sendErr = b.stream.SendMsg(&b.msg)
		}
	}
	clear(b.msg.Responses)
	for i, a := range ready {
		a.r.recycle()
		ready[i] = readyAnswer{}
	}
}
