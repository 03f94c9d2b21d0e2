package consumer

import (
	"runtime"
	"sync"

	"github.com/ferrylabs/ferry/proto/wire"
)

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
