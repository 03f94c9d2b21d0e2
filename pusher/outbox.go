package pusher

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
	"google.golang.org/grpc"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

// An outbox is a stream's account of the requests it holds unanswered,
// and the way out for their answers. Beside it are the stream's readers,
// whose every wait is the outbox's, and the bounds it accounts in
// (pending, streamHold, at the end of this file).
//
// In: the stream's reader (readPush, readBatches) takes, for each
// request, a slot of the stream before reading it and room in the
// server's bytes before decoding it; both come back when its answer is
// sent (received.recycle), or dropped once the stream ended. While the
// reader waits for either, the stream is not read, and gRPC's flow
// control holds the client.
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

// readPush is a Push stream's reader: receive a request, admit it, hand
// it on (stream.handOn), until the stream ends.
func readPush(st *stream) error {
	var env envelope
	for {
		if err := st.out.recv(st.ctx, &env); err != nil {
			return err
		}
		cost, err := st.out.admit(st.ctx, len(env.WriteRequest), true)
		if err != nil {
			return err
		}
		if err := st.handOn(&env, cost); err != nil {
			return err
		}
	}
}

// readBatches is a PushBatch stream's reader: receive a message, admit
// its requests one after the other and hand each on (stream.handOn),
// until the stream ends. Each request takes its slot and its bytes, and is decoded, as if
// it had come alone. The first slot is taken before the message is read,
// so a stream at its bound is not read at all; the message's other
// requests then wait for theirs, already read, which the bound on a
// message's size keeps small.
func readBatches(st *stream) error {
	var msg batchEnvelope
	var env envelope
	for {
		if err := st.out.recv(st.ctx, &msg); err != nil {
			return err
		}
		if msg.Len() == 0 {
			st.out.room.give() // the slot of a first request that is not there
			continue
		}
		for i := range msg.Len() {
			e := msg.At(i)
			cost, err := st.out.admit(st.ctx, len(e.WriteRequest), i == 0)
			if err != nil {
				return err
			}
			// decode swaps the envelope's buffer for a pooled one, which
			// the message's envelope keeps to read a later request into.
			env.Envelope = *e
			err = st.handOn(&env, cost)
			e.WriteRequest = env.WriteRequest
			if err != nil {
				return err
			}
		}
	}
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

// writeBatches sends ready in as few messages as the bound allows, msg
// being the message to reuse.
func writeBatches(stream grpc.ServerStream, msg *ferryv1.PushBatchResponse, ready []readyAnswer) error {
	// The message keeps no answer once sent: they are recycled.
	defer func() { clear(msg.Responses[:cap(msg.Responses)]) }()
	for start := 0; start < len(ready); start += maxAnswersPerMessage {
		part := ready[start:min(start+maxAnswersPerMessage, len(ready))]
		msg.Responses = msg.Responses[:0]
		for _, a := range part {
			msg.Responses = append(msg.Responses, a.resp)
		}
		if err := stream.SendMsg(msg); err != nil {
			return err
		}
	}
	return nil
}

// maxAnswersPerMessage bounds the answers of one PushBatchResponse, so
// that a message stays far below any receiver's message size limit even
// when every answer quotes a long reason.
const maxAnswersPerMessage = 1024

// received is one request read from a stream or a PushOne call; bad is
// set when its write request did not decode. A decoded request's memory is
// owner's: call recycle once its answer is sent, never earlier, since the
// backend's view of the request and the answer's reason may point into it.
type received struct {
	req   *ferryv1.PushRequest
	size  int // bytes of the encoded write request
	bad   error
	owner *pooledRequest // nil when bad
	hold  *streamHold    // the stream's slot and the server's bytes it holds
	cost  int64          // the bytes it holds
}

// recycle returns the request's memory for reuse by later requests and
// gives back its slot and bytes.
func (r received) recycle() {
	if r.owner != nil {
		r.owner.release()
	}
	if r.hold != nil {
		r.hold.done(r.cost)
	}
}

// What the server holds unanswered is bounded twice. A stream may hold at
// most -pusher.max-pending-per-stream requests: its reader takes a slot
// before reading the next request and the slot comes back once the
// request's answer is sent (or the stream ended). A client that sends and
// never reads its answers thus stops being read, and gRPC's flow control
// (a fixed stream window, see Listen) holds the rest of its data on the
// client's side. All streams and PushOne calls together hold at most
// -pusher.max-pending-bytes: a stream waits for room before decoding, a
// PushOne call without room is answered SERVER_ERROR.
//
// The byte bound is shared: clients that never read their answers can
// take it all and hold back the others. The per-stream and per-connection
// bounds make that take many streams; a stream's answers going unread is
// the client's fault, and ending such streams after a timeout is left for
// later.

// pendingOverhead is what a request costs beyond its encoded bytes while it
// is held: the goroutine that applies or answers it, its pooled decoder's
// bookkeeping. Counting it keeps a flood of tiny requests from holding
// millions of goroutines under a byte bound meant for payloads.
const pendingOverhead = 8 << 10

// pending is the server-wide account of requests held unanswered.
type pending struct {
	bytes    *semaphore.Weighted
	max      int64
	requests atomic.Int64 // held now, for tests and the gauge
	held     atomic.Int64 // bytes held now
	metrics  *metrics
}

func newPending(max int64, m *metrics) *pending {
	return &pending{bytes: semaphore.NewWeighted(max), max: max, metrics: m}
}

// cost is what a request of size encoded bytes counts against the bound. A
// request larger than the whole bound counts as the whole bound, so that
// it waits for the others instead of forever.
func (p *pending) cost(size int) int64 {
	return min(int64(size)+pendingOverhead, p.max)
}

// acquire waits for room for n bytes.
func (p *pending) acquire(ctx context.Context, n int64) error {
	if err := p.bytes.Acquire(ctx, n); err != nil {
		return err
	}
	p.add(n)
	return nil
}

// tryAcquire takes room for n bytes if there is some now.
func (p *pending) tryAcquire(n int64) bool {
	if !p.bytes.TryAcquire(n) {
		return false
	}
	p.add(n)
	return true
}

func (p *pending) add(n int64) {
	p.requests.Add(1)
	p.held.Add(n)
	p.metrics.pendingRequests.Inc()
	p.metrics.pendingBytes.Add(float64(n))
}

// release gives back what acquire took.
func (p *pending) release(n int64) {
	p.requests.Add(-1)
	p.held.Add(-n)
	p.metrics.pendingRequests.Dec()
	p.metrics.pendingBytes.Sub(float64(n))
	p.bytes.Release(n)
}

// streamHold is one stream's share: its slots and the server's account.
type streamHold struct {
	slots  chan struct{}
	server *pending
}

func newStreamHold(perStream int, server *pending) *streamHold {
	return &streamHold{slots: make(chan struct{}, perStream), server: server}
}

// take waits for a slot of the stream; false when ctx ended first.
func (h *streamHold) take(ctx context.Context) bool {
	select {
	case h.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// give returns a slot taken by take.
func (h *streamHold) give() { <-h.slots }

// done ends the hold of one request: its bytes and its slot.
func (h *streamHold) done(n int64) {
	h.server.release(n)
	h.give()
}

// tryTake takes a slot of the stream if one is free now.
func (h *streamHold) tryTake() bool {
	select {
	case h.slots <- struct{}{}:
		return true
	default:
		return false
	}
}
