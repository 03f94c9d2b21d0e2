package consumer

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/ferrylabs/ferry/consumer/lane"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/wire"
)

// A request's way over the stream to the pusher, and its answer's way
// back: Send registers a call in the open stream's pending and queues its
// request for the stream's writer (batchWriter), which puts what is queued
// into one message; the stream's receiver takes each answer's call out of
// pending and settles it, and the lane waiting in call.Wait has its
// answer. sender.go keeps a stream open.

// Send sends the request for it: on the open stream when prev is nil,
// else on prev's stream, or not at all (nil) when that one is gone.
func (s *sender) Send(ctx context.Context, prev lane.Call, it *lane.Item, seq uint64) lane.Call {
	c := &call{
		req: wire.PushRequest{
			RequestID: s.nextID.Add(1), Sequence: seq,
			Tenant: it.Tenant, Topic: s.topic, Partition: it.Partition, Offset: it.Offset, Value: it.Value,
		},
		done: make(chan struct{}),
	}
	if prev == nil {
		return s.start(ctx, c)
	}
	if s.startOn(prev.(*call).st, c) {
		return c
	}
	return nil
}

// start sends req and returns without waiting for the answer, so that a
// lane can keep several requests in flight. It waits up to a second for a
// stream when none is open.
func (s *sender) start(ctx context.Context, c *call) *call {
	st, err := s.current(ctx, time.Second)
	if err != nil {
		c.settle(nil, err)
		return c
	}
	if !s.startOn(st, c) {
		c.settle(nil, errStreamGone)
	}
	return c
}

// errStreamGone is a request's error when its stream broke before it
// could be sent.
var errStreamGone = errors.New("consumer: the stream to the pusher broke")

// current returns the open stream, waiting up to wait for one.
func (s *sender) current(ctx context.Context, wait time.Duration) (*stream, error) {
	// The stream is almost always open: no timer for that case, which is
	// once per request (a timer per request was 3% of a consumer's CPU
	// at 10-series records).
	s.mu.Lock()
	st := s.cur
	s.mu.Unlock()
	if st != nil {
		return st, nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		st, changed := s.cur, s.changed
		s.mu.Unlock()
		if st != nil {
			return st, nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return nil, ErrNoStream
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// startOn sends c's request on st, the stream of the lane's requests
// still in flight, and returns false without sending when st is no longer
// the open stream. A lane's requests in flight must share one stream: one
// sent on a new stream while earlier ones died with the old could be
// applied before them.
func (s *sender) startOn(st *stream, c *call) bool {
	s.mu.Lock()
	current := s.cur == st
	s.mu.Unlock()
	if st == nil || !current {
		return false
	}
	if st.register(c) != nil {
		return false
	}
	c.st = st
	if st.out != nil {
		st.out.queue(&c.req)
		return true
	}
	st.sendMu.Lock()
	// A failed write is left to the receiver: see stream.fail.
	_ = st.s.SendMsg(&c.req)
	st.sendMu.Unlock()
	return true
}

// stream is one open stream, Push or PushBatch, and the requests waiting
// on it.
type stream struct {
	s      grpc.ClientStream
	cancel context.CancelFunc
	// out writes a PushBatch stream's messages; nil on a Push stream,
	// whose requests are sent one at a time under sendMu.
	out    *batchWriter
	sendMu sync.Mutex

	mu      sync.Mutex
	pending map[uint64]*call
	err     error // set once the stream is broken
}

func (st *stream) register(c *call) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.err != nil {
		return st.err
	}
	st.pending[c.req.RequestID] = c
	return nil
}

func (st *stream) unregister(id uint64) {
	st.mu.Lock()
	delete(st.pending, id)
	st.mu.Unlock()
}

// messageBounds bound the messages of a PushBatch stream.
type messageBounds struct {
	// requests is the most requests in one message; 0 sends every
	// request alone on a Push stream instead.
	requests int
	// bytes is the most encoded bytes of requests in one message; a
	// request larger than that goes alone.
	bytes int
}

// batchWriter writes a PushBatch stream's messages. Send queues a request
// and returns; the writer's goroutine takes what is queued when it is free
// to write, up to the bounds, and sends it as one message. It never waits
// for a message to fill: a request queued while nothing is being written
// goes out at once, alone, and the requests queued while a message is
// being written share the next one. The queue is the lanes' requests in
// flight, which their window bounds.
type batchWriter struct {
	st     *stream
	bounds messageBounds

	mu    sync.Mutex
	ready []*wire.PushRequest // in the order queued
	wake  chan struct{}       // something was queued since the writer looked
}

// newBatchWriter starts the writer of st, which ends with the stream.
func newBatchWriter(st *stream, bounds messageBounds) *batchWriter {
	w := &batchWriter{st: st, bounds: bounds, wake: make(chan struct{}, 1)}
	go w.run()
	return w
}

// queue queues req for the next message. Requests go out in the order
// queued, so a lane's requests keep their order on the stream.
func (w *batchWriter) queue(req *wire.PushRequest) {
	w.mu.Lock()
	w.ready = append(w.ready, req)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run writes messages until the stream ends or a write fails. A failed
// write ends the stream, but the requests waiting on it fail only when its
// receiver reads the end, and their lanes resend them on the next stream.
func (w *batchWriter) run() {
	done := w.st.s.Context().Done()
	var msg wire.PushBatch
	for {
		select {
		case <-w.wake:
		case <-done:
			return
		}
		for {
			// One yield before taking the queue: the answers that woke
			// this goroutine woke lanes too, which would otherwise run
			// only after it and find it sending their requests one by
			// one. It waits for nothing but goroutines already runnable.
			runtime.Gosched()
			msg.Requests = w.take(msg.Requests[:0])
			if len(msg.Requests) == 0 {
				break
			}
			err := w.st.s.SendMsg(&msg)
			clear(msg.Requests)
			if err != nil {
				// The stream is over; its receiver fails what still
				// waits, after the answers that came before the end
				// (see stream.fail).
				return
			}
		}
	}
}

// take moves the oldest queued requests into batch, up to the bounds, and
// returns it; at least one when any is queued.
func (w *batchWriter) take(batch []*wire.PushRequest) []*wire.PushRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	bytes := 0
	n := 0
	for n < len(w.ready) && n < w.bounds.requests {
		size := w.ready[n].Size()
		if n > 0 && bytes+size > w.bounds.bytes {
			break
		}
		bytes += size
		n++
	}
	batch = append(batch, w.ready[:n]...)
	// The rest moves to the front: the queue's array is reused rather
	// than grown at its end forever.
	rest := copy(w.ready, w.ready[n:])
	clear(w.ready[rest:])
	w.ready = w.ready[:rest]
	return batch
}

// receive delivers answers to their waiters until the stream ends.
func (s *sender) receive(st *stream) {
	if st.out != nil {
		s.receiveBatches(st)
		return
	}
	var one [1]*ferryv1.PushResponse
	var calls []*call
	for {
		resp := new(ferryv1.PushResponse)
		if err := st.s.RecvMsg(resp); err != nil {
			st.fail(fmt.Errorf("stream to the pusher broke: %w", err))
			return
		}
		one[0] = resp
		calls = s.deliver(st, one[:], calls)
	}
}

// receiveBatches is receive for a PushBatch stream.
func (s *sender) receiveBatches(st *stream) {
	var msg ferryv1.PushBatchResponse
	var calls []*call
	for {
		// The generated decoder appends to what is there; the answers
		// themselves are new ones at every message, handed to waiters.
		clear(msg.Responses)
		msg.Responses = msg.Responses[:0]
		if err := st.s.RecvMsg(&msg); err != nil {
			st.fail(fmt.Errorf("stream to the pusher broke: %w", err))
			return
		}
		calls = s.deliver(st, msg.Responses, calls)
	}
}

// deliver hands each of resps to the request waiting for it. The calls
// are taken out of the stream's pending under one lock, then their
// waiters are woken; calls is scratch space, returned for reuse.
func (s *sender) deliver(st *stream, resps []*ferryv1.PushResponse, calls []*call) []*call {
	calls = st.take(resps, calls[:0])
	for i, resp := range resps {
		switch c := calls[i]; {
		case c != nil:
			c.settle(resp, nil)
		case resp != nil:
			s.logger.Warn("answer for an unknown request ID", "request_id", resp.RequestId)
		}
	}
	clear(calls)
	return calls
}

// take takes the calls answered by resps out of pending and appends them
// to calls, nil for an answer whose request is unknown (or a nil answer),
// so that calls[i] is resps[i]'s.
func (st *stream) take(resps []*ferryv1.PushResponse, calls []*call) []*call {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, resp := range resps {
		var c *call
		if resp != nil {
			c = st.pending[resp.RequestId]
			delete(st.pending, resp.RequestId)
		}
		calls = append(calls, c)
	}
	return calls
}

// call is one request sent on a stream, waiting for its answer. The
// request and its answer live in it, and its channel carries no value, so
// a request costs two allocations (a record is sent once or twice per 10
// samples at small records, where each one showed in the profile).
type call struct {
	req wire.PushRequest
	st  *stream // nil until sent
	// done is closed once resp or err is set, by the stream's receiver or
	// its failure, whichever takes the call out of the stream's pending
	// first: it is closed once.
	done chan struct{}
	resp *ferryv1.PushResponse
	err  error // the stream broke, or the request could not be sent
}

// settle sets the call's answer, or its error when resp is nil, and wakes
// its waiter. The caller took the call out of its stream's pending: no one
// else settles it.
func (c *call) settle(resp *ferryv1.PushResponse, err error) {
	c.resp, c.err = resp, err
	close(c.done)
}

// Wait returns the answer to the call, or woken when wake is ready first
// (the call keeps waiting). An error means the request's fate is unknown:
// the stream broke, or no stream was open.
func (c *call) Wait(ctx context.Context, wake <-chan struct{}) (lane.Answer, bool, error) {
	select {
	case <-c.done:
		if c.err != nil {
			return lane.Answer{}, false, c.err
		}
		return answer(c.resp), false, nil
	case <-wake:
		return lane.Answer{}, true, nil
	case <-ctx.Done():
		if c.st != nil { // nil: never sent, nothing to take back
			c.st.unregister(c.req.RequestID)
		}
		return lane.Answer{}, false, ctx.Err()
	}
}

// answer translates the pusher's response for the lanes. A status this
// version does not know is a server error: retried, never skipped.
func answer(resp *ferryv1.PushResponse) lane.Answer {
	a := lane.Answer{Reason: resp.Reason, RetryAfter: time.Duration(resp.RetryAfterMs) * time.Millisecond}
	switch resp.Status {
	case ferryv1.AckStatus_ACK_STATUS_OK:
		a.Status = lane.OK
	case ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR:
		a.Status = lane.ClientError
	default:
		a.Status = lane.ServerError
		a.Reason = fmt.Sprintf("%s: %s", resp.Status, resp.Reason)
	}
	return a
}

// fail breaks the stream: every waiter gets err, and so does every later
// register, so nothing waits on a dead stream.
//
// The receiver calls it when RecvMsg returns the stream's end, and close
// does; a failed write does not. gRPC ends the stream on any write error,
// and RecvMsg then returns first the answers that arrived before the end,
// then the end: the pusher may have answered requests and then ended the
// stream (a shutdown, a lost connection). Failed by the write, those
// requests would be sent again by their lanes, and applied twice.
func (st *stream) fail(err error) {
	st.mu.Lock()
	if st.err == nil {
		st.err = err
		for id, c := range st.pending {
			c.settle(nil, err)
			delete(st.pending, id)
		}
	}
	st.mu.Unlock()
	st.cancel()
}

// done returns a channel closed when the stream is broken or ctx is done.
func (st *stream) done(ctx context.Context) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		defer close(out)
		select {
		case <-st.s.Context().Done():
		case <-ctx.Done():
		}
	}()
	return out
}
