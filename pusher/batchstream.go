package pusher

import (
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/wire"
)

// PushBatch serves a stream whose messages carry several requests each
// (see the proto). Every request goes through exactly what a Push
// stream's does, the stream's slot and the server's bytes, decoding,
// the sequencer and its batches, the answer's counting; only the framing
// differs: a message's requests are read one after the other, and the
// answers ready at the moment go out together in one message, those that
// become ready while a message's requests are admitted at the end of its
// admission (see receiveBatches).
func (s *Server) PushBatch(stream ferryv1.PusherService_PushBatchServer) error {
	b := newBatchSender(stream)
	// serve gives every answer to b before it returns; end sends those
	// still held while the stream is open, and keeps the reader, which
	// may outlive serve, from sending after it.
	defer b.end()
	return s.serve(stream, b.receive, b.send)
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
//
// While it admits a message's requests the reader holds the stream's
// answers (b.hold), and sends those that came meanwhile in one message
// once the message is admitted (b.release): a consumer's message carries
// requests of many tenants, each applied alone, so without the hold every
// answer went in a message of its own and both sides paid a message per
// record. The hold ends before every wait of the reader: for the next
// message, for a slot of the stream or for the server's bytes (both come
// back only as answers are sent), so an answer waits at most for the
// admission of the rest of the message it came during, which is decoding
// and nothing else, and never for more input. Handing a request to the
// stream's loop is not a wait: the loop only queues it, and once it stops
// taking requests it ends the stream, whose end sends what is held.
func receiveBatches(stream grpc.ServerStream, hold *streamHold, dec decoding, reqs chan<- received, errc chan<- error, b *batchSender) {
	ctx := stream.Context()
	var msg batchEnvelope
	var env envelope
	for {
		b.release()
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
		b.hold()
		for i := range msg.Len() {
			if i > 0 && !hold.tryTake() {
				b.release()
				if !hold.take(ctx) {
					errc <- ctx.Err()
					return
				}
				b.hold()
			}
			// decode swaps the envelope's buffer for a pooled one, which
			// the message's envelope keeps to read a later request into.
			e := msg.At(i)
			env.Envelope = *e
			err := admit(ctx, hold, dec, &env, reqs, b)
			e.WriteRequest = env.WriteRequest
			if err != nil {
				b.release()
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

// maxHeldAnswers bounds the answers the reader holds: that many are sent
// at once, hold or not. It bounds an answer's wait at high rates, when the
// answers come faster than a message is admitted, and a message of 64
// answers already saves all but a sixty-fourth of the per-message cost.
const maxHeldAnswers = 64

// maxHold bounds how long an answer is held when others come: the first
// answer to come after it has waited that long sends the queue, and the
// hold goes on for the answers after it. Admission
// is a few microseconds a request, but on a busy machine the reader may
// be descheduled in the middle of a message with answers held (measured:
// a p99 wait of 8–32 ms at load 15–28 on two cores without this bound).
// No timer: an answer that no other follows waits for the release.
const maxHold = 200 * time.Microsecond

// batchSender sends a PushBatch stream's answers. The goroutine that has
// answers sends them itself unless another is sending or the reader holds
// them; then it queues them and returns, and the sending one, once its
// message is written, sends everything queued meanwhile in one message,
// until the queue is empty. So the answers given in one call (an apply
// call's) go in one message, answers that come while a message is written
// share the next one, and no goroutine is woken to send (a hand-off per
// answer cost more than the send). An answer waits for others only while
// the reader holds the queue (receiveBatches), and never behind more than
// maxHeldAnswers others.
type batchSender struct {
	stream grpc.ServerStream

	mu      sync.Mutex
	queue   []readyAnswer
	holding bool // the reader is admitting a message's requests
	// heldSince is when the oldest answer held came; now is time.Now,
	// replaced by tests.
	heldSince time.Time
	now       func() time.Time
	overdue   bool // an answer came maxHold after the oldest held
	ended     bool // the stream's handler is returning: no more holds
	sending   bool // a goroutine is sending; the fields below are its own
	spare     []readyAnswer
	msg       ferryv1.PushBatchResponse
	sendErr   error
	// sent is signalled when a goroutine stops sending, for end.
	sent sync.Cond
}

// readyAnswer is an answer waiting to be sent, with its request, recycled
// once the answer is encoded: the answer's reason may quote its memory.
type readyAnswer struct {
	r    received
	resp *ferryv1.PushResponse
}

// errStreamEnded is what a batchSender's writes get after end: the
// stream's handler has returned, and its stream must not be used.
var errStreamEnded = errors.New("pusher: the stream ended")

func newBatchSender(stream grpc.ServerStream) *batchSender {
	b := &batchSender{stream: stream, now: time.Now}
	b.sent.L = &b.mu
	return b
}

// receive is the stream's readFunc: receiveBatches, holding answers in b.
func (b *batchSender) receive(stream grpc.ServerStream, hold *streamHold, dec decoding, reqs chan<- received, errc chan<- error) {
	receiveBatches(stream, hold, dec, reqs, errc, b)
}

// send sends the answers of rs, with whatever else is queued, or queues
// them for the goroutine sending now or for the end of the reader's hold.
// It returns once they are sent or queued. It is the stream's sendFunc.
func (b *batchSender) send(rs []received, as []answered) {
	b.mu.Lock()
	if b.holding {
		if len(b.queue) == 0 {
			b.heldSince = b.now()
		} else if b.now().Sub(b.heldSince) >= maxHold {
			b.overdue = true
		}
	}
	for i, r := range rs {
		b.queue = append(b.queue, readyAnswer{r: r, resp: as[i].resp})
	}
	b.drain()
}

// hold keeps the answers given from now on queued until release; before,
// maxHeldAnswers of them, or one that comes maxHold after the oldest, send
// the queue.
func (b *batchSender) hold() {
	b.mu.Lock()
	b.holding = !b.ended
	// Answers queued for a goroutine sending now have waited from now on.
	b.heldSince = b.now()
	b.mu.Unlock()
}

// release ends a hold: it sends what was queued, unless another goroutine
// is sending it.
func (b *batchSender) release() {
	b.mu.Lock()
	b.holding = false
	b.drain()
}

// end sends what is queued and ends holding for good, once no other
// goroutine is sending; later writes fail. The stream's handler calls it
// last: the reader may outlive the handler, and must not send then.
func (b *batchSender) end() {
	b.mu.Lock()
	b.ended, b.holding = true, false
	for b.sending {
		b.sent.Wait()
	}
	b.drain()
}

// drain sends the queue until it is empty, unless another goroutine is
// sending or the queue is held and shorter than maxHeldAnswers. It is
// called with mu held and returns with it released.
func (b *batchSender) drain() {
	if b.sending {
		b.mu.Unlock()
		return
	}
	b.sending = true
	for len(b.queue) > 0 && (!b.holding || b.overdue || len(b.queue) >= maxHeldAnswers) {
		ready := b.queue
		b.queue = b.spare[:0]
		b.overdue = false
		b.mu.Unlock()
		b.write(ready)
		b.mu.Lock()
		b.spare = ready[:0]
	}
	if b.ended && b.sendErr == nil {
		// The last send: from now on nothing may use the stream.
		b.sendErr = errStreamEnded
	}
	b.sending = false
	b.sent.Broadcast()
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
