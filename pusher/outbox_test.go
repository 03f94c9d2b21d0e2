package pusher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/wire"
)

// heldStream is a PushBatch stream for readBatches alone: RecvMsg reads
// the messages the test gives to in, SendMsg hands the request IDs of each
// message sent to out.
type heldStream struct {
	grpc.ServerStream
	ctx context.Context
	in  chan []byte
	out chan []uint64
}

func newHeldStream(ctx context.Context) *heldStream {
	return &heldStream{ctx: ctx, in: make(chan []byte), out: make(chan []uint64, 100)}
}

func (s *heldStream) Context() context.Context { return s.ctx }

func (s *heldStream) RecvMsg(m any) error {
	select {
	case b := <-s.in:
		return m.(*batchEnvelope).Unmarshal(b)
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

func (s *heldStream) SendMsg(m any) error {
	var ids []uint64
	for _, resp := range m.(*ferryv1.PushBatchResponse).Responses {
		ids = append(ids, resp.RequestId)
	}
	s.out <- ids
	return nil
}

// heldReader is a PushBatch stream's reader run alone: the test takes the
// admitted requests from reqs, as the handler's loop would, and answers
// them through out, as the stream's sequencer would, in an order of its
// choosing.
type heldReader struct {
	stream *heldStream
	out    *outbox
	reqs   chan received
}

// startHeldReader runs readBatches until the test ends, with slots
// requests and maxBytes bytes of room.
func startHeldReader(t *testing.T, slots int, maxBytes int64) *heldReader {
	t.Helper()
	ctx, cancel := context.WithCancel(testContext(t))
	srv := NewServer(testConfig(t), newOrderBackend(nil).backend(), slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	room := newStreamHold(slots, newPending(maxBytes, srv.metrics))
	r := &heldReader{stream: newHeldStream(ctx), reqs: make(chan received)}
	r.out = newBatchOutbox(r.stream, room)
	r.out.now = stoppedClock // the tests decide the order, not the time
	st := &stream{ctx: ctx, dec: srv.decoding(), out: r.out, reqs: r.reqs}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = readBatches(st)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return r
}

// stoppedClock is an outbox's clock that never moves: maxHold never
// ends a hold.
func stoppedClock() time.Time { return time.Unix(0, 0) }

// message gives the reader one message with requests of the IDs, each of
// its own tenant.
func (r *heldReader) message(ctx context.Context, t *testing.T, ids ...uint64) {
	t.Helper()
	msg := &wire.PushBatch{}
	for _, id := range ids {
		msg.Requests = append(msg.Requests, batchRequest(t, sequenced(id, fmt.Sprint("t", id), 1)))
	}
	b := make([]byte, msg.Size())
	if _, err := msg.MarshalToSizedBuffer(b); err != nil {
		t.Fatal(err)
	}
	select {
	case r.stream.in <- b:
	case <-ctx.Done():
		t.Fatalf("giving the reader a message: %v", ctx.Err())
	}
}

// admitted returns the next request the reader admits.
func (r *heldReader) admitted(ctx context.Context, t *testing.T) received {
	t.Helper()
	return await(ctx, t, "an admitted request", r.reqs)
}

// answer answers rs OK through the sender, as one apply call would.
func (r *heldReader) answer(rs ...received) {
	as := make([]answered, len(rs))
	for i, x := range rs {
		as[i].resp = &ferryv1.PushResponse{RequestId: x.req.RequestId}
	}
	r.out.send(rs, as)
}

// sent returns the request IDs of the next message sent.
func (r *heldReader) sent(ctx context.Context, t *testing.T) string {
	t.Helper()
	return fmt.Sprint(await(ctx, t, "a message of answers", r.stream.out))
}

// TestAnswersReadyWhileAMessageIsAdmittedShareAMessage: the answers that
// become ready while the reader admits the requests of one message go out
// together once it is admitted (each went alone before), and an answer
// ready while the reader waits for the next message goes out at once.
func TestAnswersReadyWhileAMessageIsAdmittedShareAMessage(t *testing.T) {
	ctx := testContext(t)
	r := startHeldReader(t, 100, 1<<30)
	r.message(ctx, t, 1, 2, 3, 4, 5)
	var rs []received
	for range 5 {
		rs = append(rs, r.admitted(ctx, t))
		// The reader is still admitting: the request after the one
		// answered is yet to be handed on.
		if n := len(rs); n >= 2 && n < 5 {
			r.answer(rs[n-2])
		}
	}
	if got := r.sent(ctx, t); got != "[1 2 3]" {
		t.Fatalf("first message %s, want [1 2 3]: the answers ready during the message's admission", got)
	}
	// The message is admitted; the reader waits for the next one.
	r.answer(rs[3])
	if got := r.sent(ctx, t); got != "[4]" {
		t.Errorf("an answer ready while the reader waits for a message went in %s, want [4] at once", got)
	}
	r.answer(rs[4])
	if got := r.sent(ctx, t); got != "[5]" {
		t.Errorf("message %s, want [5]", got)
	}
}

// TestAnswersAreNotHeldWhileTheReaderWaits: a stream at its bound of
// unanswered requests gets a slot back, and the server its bytes, only
// when an answer is sent, so the reader lets go of the answers it holds
// before it waits for either.
func TestAnswersAreNotHeldWhileTheReaderWaits(t *testing.T) {
	size := len(batchRequest(t, sequenced(1, "t1", 1)).Value)
	for _, tc := range []struct {
		name      string
		perStream int
		bytes     int64
		freed     string
	}{
		{"for a slot", 2, 1 << 30, "a slot"},
		// Room for two requests, not three.
		{"for bytes", 100, 2*(int64(size)+pendingOverhead) + pendingOverhead/2, "its bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			r := startHeldReader(t, tc.perStream, tc.bytes)
			r.message(ctx, t, 1, 2, 3)
			first := r.admitted(ctx, t)
			r.admitted(ctx, t)
			r.answer(first)
			if got := r.sent(ctx, t); got != "[1]" {
				t.Fatalf("message %s, want [1]", got)
			}
			if got := r.admitted(ctx, t).req.RequestId; got != 3 {
				t.Errorf("admitted request %d, want 3 once the first answer freed %s", got, tc.freed)
			}
		})
	}
}

// sentNow returns the request IDs of the message rec holds, or fails the
// test when none was sent.
func sentNow(t *testing.T, rec *heldStream) string {
	t.Helper()
	select {
	case m := <-rec.out:
		return fmt.Sprint(m)
	default:
		t.Fatal("no message sent")
		return ""
	}
}

// TestHeldAnswersAreSentAtTheBound: a hold keeps at most maxHeldAnswers
// answers; the one that reaches the bound sends them.
func TestHeldAnswersAreSentAtTheBound(t *testing.T) {
	rec := &heldStream{out: make(chan []uint64, 2*maxHeldAnswers)}
	b := newBatchOutbox(rec, nil)
	b.now = stoppedClock
	b.hold()
	for id := range uint64(maxHeldAnswers - 1) {
		b.send(answers(id))
	}
	if n := len(rec.out); n != 0 {
		t.Fatalf("%d messages sent below the bound", n)
	}
	b.send(answers(maxHeldAnswers - 1))
	if n := len(rec.out); n != 1 {
		t.Fatalf("%d messages at the bound, want 1", n)
	}
	if n := len(<-rec.out); n != maxHeldAnswers {
		t.Errorf("%d answers in the message, want %d", n, maxHeldAnswers)
	}
	b.send(answers(1000))
	b.release()
	if got := sentNow(t, rec); got != "[1000]" {
		t.Errorf("message %s after the release, want [1000]", got)
	}
}

// TestTheStreamsEndSendsHeldAnswersAndEndsSending: end sends what is held,
// whether or not the reader released it, and nothing is sent after it: the
// reader may outlive the stream's handler.
func TestTheStreamsEndSendsHeldAnswersAndEndsSending(t *testing.T) {
	rec := &heldStream{out: make(chan []uint64, 2*maxHeldAnswers)}
	b := newBatchOutbox(rec, nil)
	b.now = stoppedClock
	b.hold()
	b.send(answers(1, 2))
	b.end()
	if got := sentNow(t, rec); got != "[1 2]" {
		t.Errorf("message %s at the end, want [1 2]", got)
	}
	b.hold()
	b.send(answers(3))
	b.release()
	select {
	case m := <-rec.out:
		t.Errorf("message %v sent after the end", m)
	case <-time.After(10 * time.Millisecond):
	}
}

// TestAnAnswerHeldTooLongIsSentWithTheNext: an answer that comes maxHold
// after the oldest held one sends the queue, so a reader
// descheduled in the middle of a message holds answers no longer than
// that while others come.
func TestAnAnswerHeldTooLongIsSentWithTheNext(t *testing.T) {
	rec := &heldStream{out: make(chan []uint64, 10)}
	b := newBatchOutbox(rec, nil)
	clock := time.Unix(0, 0)
	b.now = func() time.Time { return clock }
	b.hold()
	b.send(answers(1))
	clock = clock.Add(maxHold - time.Microsecond)
	b.send(answers(2))
	if n := len(rec.out); n != 0 {
		t.Fatalf("%d messages before the bound", n)
	}
	clock = clock.Add(time.Microsecond)
	b.send(answers(3))
	if got := sentNow(t, rec); got != "[1 2 3]" {
		t.Fatalf("message %s at the bound, want [1 2 3]", got)
	}
	// The hold goes on for the next answers.
	b.send(answers(4))
	if n := len(rec.out); n != 0 {
		t.Fatalf("%d messages after the bound's, want the next answer held", n)
	}
	b.release()
	if got := sentNow(t, rec); got != "[4]" {
		t.Errorf("message %s after the release, want [4]", got)
	}
}

// TestAnOutboxSendsWhatItHoldsBeforeEveryWait is the outbox's invariant:
// answers held while the reader decodes go out before the reader waits,
// since what it waits for (a slot, bytes, the next message) comes back
// only as answers are sent; the hold resumes once the wait is over, and
// not after a failed wait, which ends the reader.
func TestAnOutboxSendsWhatItHoldsBeforeEveryWait(t *testing.T) {
	rec := &heldStream{out: make(chan []uint64, 10)}
	o := newBatchOutbox(rec, nil)
	o.now = stoppedClock
	o.hold()
	o.send(answers(1, 2))
	if n := len(rec.out); n != 0 {
		t.Fatalf("%d messages sent while the reader decodes, want the answers held", n)
	}
	err := o.wait(func() error {
		if got := sentNow(t, rec); got != "[1 2]" {
			t.Errorf("message %s sent before the wait, want [1 2]", got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	o.send(answers(3))
	if n := len(rec.out); n != 0 {
		t.Fatalf("%d messages sent after the wait, want the hold resumed", n)
	}
	failed := errors.New("the stream ended")
	if err := o.wait(func() error { return failed }); !errors.Is(err, failed) {
		t.Fatalf("wait returned %v, want its wait's error", err)
	}
	if got := sentNow(t, rec); got != "[3]" {
		t.Errorf("message %s, want [3] before the failed wait", got)
	}
	o.send(answers(4))
	if got := sentNow(t, rec); got != "[4]" {
		t.Errorf("message %s after a failed wait, want [4] at once: nothing is held", got)
	}
}
