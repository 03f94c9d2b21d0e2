package pusher

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

// An outbox is a stream's account of the requests it holds unanswered,
// and the way out for their answers.
//
// In: the stream's reader takes, for each request, a slot of the stream
// before reading it and room in the server's bytes before decoding it
// (pending.go); both come back when its answer is sent, or dropped once
// the stream ended. While the reader waits for either, the stream is not
// read, and gRPC's flow control holds the client.
//
// Out: the goroutine that has answers sends them itself, with those queued
// while another was sending, unless another is sending now: then it queues
// them and returns, and the sending one sends them next. So the answers of
// one apply call go together, and no goroutine is woken to send (a
// hand-off per answer cost more than the send).
//
// The hold, on a PushBatch stream only. A consumer's message carries
// requests of many tenants, each applied alone: without the hold every
// answer went in a message of its own, and both sides paid a message per
// record. So the answers that become ready while the reader admits a
// message's requests are held, and go out together once the reader next
// waits, or once maxHeldAnswers are held, or with the first answer that
// comes maxHold after the oldest held.
//
// The invariant: answers are held only while the reader decodes. Every
// wait of the reader (for the next message, for a slot, for the server's
// bytes) goes through wait, which sends what is held before waiting: what
// the reader waits for comes back only as answers are sent, and an answer
// must wait for decoding, never for input.
type outbox struct {
	stream grpc.ServerStream
	room   *streamHold // nil in tests that only send
	// write writes answers on the stream, stopping at the first error.
	write func(ready []readyAnswer) error
	holds bool // answers are held while the reader decodes (PushBatch)

	mu        sync.Mutex
	queue     []readyAnswer
	holding   bool      // the reader is admitting a message's requests
	heldSince time.Time // when the oldest answer held came
	now       func() time.Time
	overdue   bool // an answer came maxHold after the oldest held
	ended     bool // the stream's handler is returning: no more holds
	sending   bool // a goroutine is sending; the fields below are its own
	spare     []readyAnswer
	sendErr   error
	// sent is signalled when a goroutine stops sending, for end.
	sent sync.Cond
}

// maxHeldAnswers bounds the answers the reader holds: that many are sent
// at once, hold or not. It bounds an answer's wait at high rates, when the
// answers come faster than a message is admitted, and a message of 64
// answers already saves all but a sixty-fourth of the per-message cost.
const maxHeldAnswers = 64

// maxHold bounds how long an answer is held when others come: the first
// answer to come after it has waited that long sends the queue, and the
// hold goes on for the answers after it. Admission is a few microseconds a
// request, but on a busy machine the reader may be descheduled in the
// middle of a message with answers held (measured: a p99 wait of 8–32 ms
// at load 15–28 on two cores without this bound). No timer: an answer
// that no other follows waits for the reader's next wait.
const maxHold = 200 * time.Microsecond

// readyAnswer is an answer waiting to be sent, with its request, recycled
// once the answer is encoded: the answer's reason may quote its memory.
type readyAnswer struct {
	r    received
	resp *ferryv1.PushResponse
}

// errStreamEnded is what an outbox's writes get after end: the stream's
// handler has returned, and its stream must not be used.
var errStreamEnded = errors.New("pusher: the stream ended")

func newOutbox(stream grpc.ServerStream, room *streamHold, write func([]readyAnswer) error, holds bool) *outbox {
	o := &outbox{stream: stream, room: room, write: write, holds: holds, now: time.Now}
	o.sent.L = &o.mu
	return o
}

// recv reads the stream's next message into m once the stream has a slot
// for its first request. The reader decodes the message's requests next:
// answers are held from then on until its next wait.
func (o *outbox) recv(ctx context.Context, m any) error {
	return o.wait(func() error {
		if !o.room.take(ctx) {
			return ctx.Err()
		}
		if err := o.stream.RecvMsg(m); err != nil {
			o.room.give()
			return err
		}
		return nil
	})
}

// admit takes room for one request of size encoded bytes of the message
// recv read: a slot (the first request has the one recv took) and its cost
// in the server's bytes, which it returns. It fails only when ctx ends,
// and then holds nothing for the request.
func (o *outbox) admit(ctx context.Context, size int, first bool) (int64, error) {
	if !first && !o.room.tryTake() {
		err := o.wait(func() error {
			if !o.room.take(ctx) {
				return ctx.Err()
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	cost := o.room.server.cost(size)
	if !o.room.server.tryAcquire(cost) {
		if err := o.wait(func() error { return o.room.server.acquire(ctx, cost) }); err != nil {
			o.room.give()
			return 0, err
		}
	}
	return cost, nil
}

// wait is every wait of the reader: it sends what is held, runs f, and,
// when f succeeded, holds the answers that come while the reader decodes
// again. After a failure the reader is ending, and nothing is held.
func (o *outbox) wait(f func() error) error {
	o.release()
	if err := f(); err != nil {
		return err
	}
	o.hold()
	return nil
}

// send queues the answers of rs, as[i] that of rs[i], and sends the queue
// unless another goroutine is sending it or the reader holds it. It
// returns once they are sent or queued. It is the stream's sendFunc.
func (o *outbox) send(rs []received, as []answered) {
	o.mu.Lock()
	if o.holding {
		if len(o.queue) == 0 {
			o.heldSince = o.now()
		} else if o.now().Sub(o.heldSince) >= maxHold {
			o.overdue = true
		}
	}
	for i, r := range rs {
		o.queue = append(o.queue, readyAnswer{r: r, resp: as[i].resp})
	}
	o.drain()
}

// hold keeps the answers given from now on queued until release; before,
// maxHeldAnswers of them, or one that comes maxHold after the oldest, send
// the queue. Only wait calls it, and tests.
func (o *outbox) hold() {
	if !o.holds {
		return
	}
	o.mu.Lock()
	o.holding = !o.ended
	// Answers queued for a goroutine sending now have waited from now on.
	o.heldSince = o.now()
	o.mu.Unlock()
}

// release ends a hold: it sends what was queued, unless another goroutine
// is sending it.
func (o *outbox) release() {
	if !o.holds {
		return
	}
	o.mu.Lock()
	o.holding = false
	o.drain()
}

// end sends what is queued and ends holding for good, once no other
// goroutine is sending; later writes fail. The stream's handler calls it
// last: the reader may outlive the handler, and must not send then.
func (o *outbox) end() {
	o.mu.Lock()
	o.ended, o.holding = true, false
	for o.sending {
		o.sent.Wait()
	}
	o.drain()
}

// drain sends the queue until it is empty, unless another goroutine is
// sending or the queue is held and shorter than maxHeldAnswers. It is
// called with mu held and returns with it released.
func (o *outbox) drain() {
	if o.sending {
		o.mu.Unlock()
		return
	}
	o.sending = true
	for len(o.queue) > 0 && (!o.holding || o.overdue || len(o.queue) >= maxHeldAnswers) {
		ready := o.queue
		o.queue = o.spare[:0]
		o.overdue = false
		o.mu.Unlock()
		o.writeOut(ready)
		o.mu.Lock()
		o.spare = ready[:0]
	}
	if o.ended && o.sendErr == nil {
		// The last send: from now on nothing may use the stream.
		o.sendErr = errStreamEnded
	}
	o.sending = false
	o.sent.Broadcast()
	o.mu.Unlock()
}

// writeOut writes ready, then recycles the requests. After a failed write
// the stream is ending: the answers are only recycled.
func (o *outbox) writeOut(ready []readyAnswer) {
	if o.sendErr == nil {
		o.sendErr = o.write(ready)
	}
	for i, a := range ready {
		a.r.recycle()
		ready[i] = readyAnswer{}
	}
}
