package consumer

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/ferrylabs/ferry/consumer/lane"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

// queuedSender is a sender whose open stream queues requests in a batch
// writer that never writes (no goroutine, no gRPC): what Send does up to
// the wire, and what the stream's receiver and failure do to its calls.
func queuedSender() (*sender, *stream) {
	st := &stream{cancel: func() {}, pending: map[uint64]*call{}}
	st.out = &batchWriter{st: st, bounds: messageBounds{requests: 10, bytes: 1 << 20}, wake: make(chan struct{}, 1)}
	return &sender{topic: "ingest", cur: st, changed: make(chan struct{}), logger: slog.New(slog.DiscardHandler)}, st
}

// deliverOne hands resp to its call as the stream's receiver does, and
// reports whether a call was waiting for it.
func deliverOne(s *sender, st *stream, resp *ferryv1.PushResponse) bool {
	waiting := s.pending()
	s.deliver(st, []*ferryv1.PushResponse{resp}, nil)
	return s.pending() < waiting
}

// TestCallsAreSettledOnceEachWay: an answer, the stream's failure and the
// lane giving up each end a call, and whatever comes after the first does
// not reach it.
func TestCallsAreSettledOnceEachWay(t *testing.T) {
	s, st := queuedSender()
	ctx := context.Background()
	it := &lane.Item{Tenant: "t", Partition: 1, Offset: 10, Value: []byte{1}}
	answered := s.Send(ctx, nil, it, 1).(*call)
	failed := s.Send(ctx, answered, it, 2).(*call)
	abandoned := s.Send(ctx, answered, it, 3).(*call)
	if n := s.pending(); n != 3 {
		t.Fatalf("%d requests pending, want 3", n)
	}
	if got := st.out.take(nil); len(got) != 3 || got[0] != &answered.req || got[2].Sequence != 3 {
		t.Fatalf("queued %v, want the three calls' requests in order", got)
	}

	if !deliverOne(s, st, &ferryv1.PushResponse{RequestId: answered.req.RequestID, Status: ferryv1.AckStatus_ACK_STATUS_OK}) {
		t.Fatal("the answer found no call")
	}
	if a, _, err := answered.Wait(ctx, nil); err != nil || a.Status != lane.OK {
		t.Fatalf("answered call: %+v, %v", a, err)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := abandoned.Wait(cancelled, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned call: %v, want the context's error", err)
	}
	if n := s.pending(); n != 1 {
		t.Fatalf("%d requests pending after one answer and one abandoned, want 1", n)
	}
	if deliverOne(s, st, &ferryv1.PushResponse{RequestId: abandoned.req.RequestID}) {
		t.Fatal("a late answer reached an abandoned call")
	}

	broken := errors.New("stream broke")
	st.fail(broken)
	if _, _, err := failed.Wait(ctx, nil); !errors.Is(err, broken) {
		t.Fatalf("call on the failed stream: %v, want %v", err, broken)
	}
	if deliverOne(s, st, &ferryv1.PushResponse{RequestId: failed.req.RequestID}) {
		t.Fatal("an answer after the failure reached its call")
	}
	st.fail(errors.New("again")) // a second failure settles nothing twice
	if s.Send(ctx, failed, it, 4) != nil {
		t.Fatal("a request was sent on a stream that is not the open one")
	}
}

// TestCallWithoutAStreamEndsWithAnError: a request that found no stream
// was never sent; its Wait returns an error even when its context is done
// too (either may be picked), and has nothing to take back.
func TestCallWithoutAStreamEndsWithAnError(t *testing.T) {
	s := &sender{changed: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 50 {
		c := s.Send(ctx, nil, &lane.Item{Tenant: "t"}, 1)
		if _, _, err := c.Wait(ctx, nil); err == nil {
			t.Fatal("a request sent on no stream was answered")
		}
	}
}

// TestSendAllocations: the request, its call and the call's channel are
// two allocations (there were four: the request, the call, a channel and
// its buffer). One record is a request at small records.
func TestSendAllocations(t *testing.T) {
	s, st := queuedSender()
	ctx := context.Background()
	it := &lane.Item{Tenant: "t", Partition: 1, Offset: 10, Value: []byte{1}}
	allocs := testing.AllocsPerRun(200, func() {
		c := s.Send(ctx, nil, it, 1).(*call)
		st.out.ready = st.out.ready[:0]
		st.unregister(c.req.RequestID)
	})
	if allocs > 2 {
		t.Fatalf("%v allocations per request sent, want 2", allocs)
	}
}
