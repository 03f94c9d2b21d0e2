package consumer

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferrylabs/ferry/consumer/lane"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

// endedStream is a client stream whose pusher answered the first message
// and then ended the stream: writes after the first fail with io.EOF, as
// gRPC's do once the server's status came, and the receiver reads the
// answers the test hands it, then the stream's end.
type endedStream struct {
	grpc.ClientStream // only the methods below are called
	ctx               context.Context
	writes            int
	written           chan struct{} // one value per write, failed or not
	answers           chan *ferryv1.PushResponse
}

func (s *endedStream) Context() context.Context { return s.ctx }

func (s *endedStream) SendMsg(any) error {
	s.writes++
	s.written <- struct{}{}
	if s.writes > 1 {
		return io.EOF
	}
	return nil
}

func (s *endedStream) RecvMsg(m any) error {
	var resp *ferryv1.PushResponse
	select {
	case r, ok := <-s.answers:
		if !ok {
			return status.Error(codes.Unavailable, "the pusher ended the stream")
		}
		resp = r
	case <-s.ctx.Done():
		return status.FromContextError(s.ctx.Err()).Err()
	}
	switch m := m.(type) {
	case *ferryv1.PushBatchResponse:
		m.Responses = append(m.Responses, resp)
	case *ferryv1.PushResponse:
		*m = *resp
	}
	return nil
}

// TestAFailedWriteDoesNotFailAnsweredRequests: the pusher answers a
// request and ends the stream, and the next write fails before the
// receiver has read that answer. The answered request must get its answer:
// failing it with the stream would make its lane send it again, and the
// pusher apply it twice. The request whose write failed gets the stream's
// error once the receiver reads the end.
func TestAFailedWriteDoesNotFailAnsweredRequests(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{true, false} {
		name := "Push"
		if batch {
			name = "PushBatch"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			sctx, cancel := context.WithCancel(ctx)
			cs := &endedStream{ctx: sctx, written: make(chan struct{}, 2), answers: make(chan *ferryv1.PushResponse)}
			st := &stream{s: cs, cancel: cancel, pending: map[uint64]*call{}}
			if batch {
				st.out = newBatchWriter(st, messageBounds{requests: 10, bytes: 1 << 20})
			}
			s := &sender{topic: "ingest", cur: st, changed: make(chan struct{}), logger: slog.New(slog.DiscardHandler)}
			received := make(chan struct{})
			go func() { s.receive(st); close(received) }()
			defer func() { cancel(); <-received }()

			first := s.Send(ctx, nil, &lane.Item{Tenant: "t", Offset: 1, Value: []byte{1}}, 1).(*call)
			<-cs.written
			second := s.Send(ctx, first, &lane.Item{Tenant: "t", Offset: 2, Value: []byte{2}}, 2).(*call)
			<-cs.written // it failed: the pusher had ended the stream

			// The write's failure must settle nothing; give it the time to,
			// if it would.
			select {
			case <-first.done:
				t.Fatalf("the answered request failed with the write of the next one: %v", first.err)
			case <-time.After(200 * time.Millisecond):
			}
			cs.answers <- &ferryv1.PushResponse{RequestId: first.req.RequestID, Status: ferryv1.AckStatus_ACK_STATUS_OK}
			if a, _, err := first.Wait(ctx, nil); err != nil || a.Status != lane.OK {
				t.Fatalf("answered request: %+v, %v; want its answer OK", a, err)
			}
			close(cs.answers)
			if _, _, err := second.Wait(ctx, nil); err == nil || status.Code(err) != codes.Unavailable {
				t.Fatalf("request whose write failed: %v, want the stream's end", err)
			}
		})
	}
}
