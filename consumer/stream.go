package consumer

import (
	"context"
	"sync"

	"google.golang.org/grpc"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

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
