package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferrylabs/ferry/consumer/lane"
	"github.com/ferrylabs/ferry/internal/backoff"
	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/tlsreload"
	"github.com/ferrylabs/ferry/proto/codec"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/wire"
)

// TestBatchWriterKeepsItsBounds checks what one message takes of the
// queue: the oldest requests, at most the bound's count and bytes, and a
// request larger than the bytes alone.
func TestBatchWriterKeepsItsBounds(t *testing.T) {
	w := &batchWriter{bounds: messageBounds{requests: 3, bytes: 1000}}
	sizes := []int{100, 100, 100, 100, 600, 600, 2000, 10}
	for i, size := range sizes {
		w.ready = append(w.ready, &wire.PushRequest{RequestID: uint64(i), Value: make([]byte, size)})
	}
	var got [][]uint64
	for len(w.ready) > 0 {
		var ids []uint64
		for _, r := range w.take(nil) {
			ids = append(ids, r.RequestID)
		}
		got = append(got, ids)
	}
	if want := "[[0 1 2] [3 4] [5] [6] [7]]"; fmt.Sprint(got) != want {
		t.Errorf("messages %v, want %s", got, want)
	}
}

// olderPusher is a push service as it was before PushBatch: it knows Push
// only. Unknown methods are counted and refused as gRPC refuses them.
type olderPusher struct {
	streams  atomic.Int64
	unknown  atomic.Int64
	requests atomic.Int64
}

var olderPusherDesc = grpc.ServiceDesc{
	ServiceName: "ferry.v1.PusherService",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{StreamName: "Push", ServerStreams: true, ClientStreams: true, Handler: func(srv any, stream grpc.ServerStream) error {
		return srv.(*olderPusher).push(stream)
	}}},
}

// push answers every request OK; the first stream ends after its first
// answer, so that the sender opens another.
func (p *olderPusher) push(stream grpc.ServerStream) error {
	first := p.streams.Add(1) == 1
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	for {
		var req ferryv1.PushRequest
		if err := stream.RecvMsg(&req); err != nil {
			return nil //nolint:nilerr // the stream ended: nothing to answer
		}
		p.requests.Add(1)
		if err := stream.SendMsg(&ferryv1.PushResponse{RequestId: req.RequestId, Status: ferryv1.AckStatus_ACK_STATUS_OK}); err != nil {
			return err
		}
		if first {
			return status.Error(codes.Unavailable, "ending the first stream")
		}
	}
}

// serveGRPC serves g on a loopback listener until the test ends.
func serveGRPC(t *testing.T, g *grpc.Server) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// logCounter is a slog handler counting the records whose message holds
// a string.
type logCounter struct {
	contains string
	n        atomic.Int64
}

func (h *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCounter) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.contains) {
		h.n.Add(1)
	}
	return nil
}
func (h *logCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logCounter) WithGroup(string) slog.Handler      { return h }

// runSender runs a sender of addr until the test ends.
func runSender(t *testing.T, addr string, bounds messageBounds, logger *slog.Logger) *sender {
	t.Helper()
	s, err := newSender(addr, "ingest", bounds, tlsreload.Client{}, backoff.Policy{Min: time.Millisecond, Max: 10 * time.Millisecond}, logger)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = s.close()
	})
	return s
}

// sendUntilOK sends the request of it until it is answered, as a lane
// would after a broken stream, and returns the answer.
func sendUntilOK(ctx context.Context, t *testing.T, s *sender, it *lane.Item) lane.Answer {
	t.Helper()
	for ctx.Err() == nil {
		a, _, err := s.Send(ctx, nil, it, 0).Wait(ctx, nil)
		if err == nil {
			return a
		}
	}
	t.Fatalf("request for offset %d never answered: %v", it.Offset, ctx.Err())
	return lane.Answer{}
}

// TestSenderFallsBackToPushOnAnOlderPusher has the sender meet a pusher
// without PushBatch: the requests go on Push streams, the new stream after
// a break too, without asking for PushBatch again, and the fallback is
// logged once.
func TestSenderFallsBackToPushOnAnOlderPusher(t *testing.T) {
	t.Parallel()
	p := &olderPusher{}
	g := grpc.NewServer(codec.ServerOption(), grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		p.unknown.Add(1)
		return status.Error(codes.Unimplemented, "unknown method")
	}))
	g.RegisterService(&olderPusherDesc, p)
	logs := &logCounter{contains: "does not serve PushBatch"}
	s := runSender(t, serveGRPC(t, g), messageBounds{requests: 64, bytes: 1 << 20}, slog.New(logs))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 3 {
		it := &lane.Item{Tenant: "tenant-1", Offset: int64(i), Value: testShape.Marshal("tenant-1", i)}
		if a := sendUntilOK(ctx, t, s, it); a.Status != lane.OK {
			t.Fatalf("request %d answered %v", i, a)
		}
	}
	if n := p.streams.Load(); n < 2 {
		t.Errorf("%d Push streams, want at least 2 (the first one ended)", n)
	}
	if n := p.unknown.Load(); n != 1 {
		t.Errorf("PushBatch asked for %d times, want once", n)
	}
	if n := logs.n.Load(); n != 1 {
		t.Errorf("the fallback logged %d times, want once", n)
	}
}

// killingPusher serves PushBatch and answers every request OK, recording
// the steps it answered per tenant, except on its first stream: there, the
// first message holding several requests gets its first request answered,
// and then the stream is killed with the others unanswered.
type killingPusher struct {
	mu       sync.Mutex
	steps    map[string][]int
	streams  int
	killed   bool
	unsent   int // requests of the killed message left unanswered
	messages int // messages of more than one request
}

var killingPusherDesc = grpc.ServiceDesc{
	ServiceName: "ferry.v1.PusherService",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{StreamName: "PushBatch", ServerStreams: true, ClientStreams: true, Handler: func(srv any, stream grpc.ServerStream) error {
		return srv.(*killingPusher).pushBatch(stream)
	}}},
	Methods: []grpc.MethodDesc{{MethodName: "Sync", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		if err := dec(new(ferryv1.SyncRequest)); err != nil {
			return nil, err
		}
		return &ferryv1.SyncResponse{}, nil
	}}},
}

func (p *killingPusher) pushBatch(stream grpc.ServerStream) error {
	p.mu.Lock()
	p.streams++
	first := p.streams == 1
	p.mu.Unlock()
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	for {
		var msg ferryv1.PushBatchRequest
		if err := stream.RecvMsg(&msg); err != nil {
			return nil //nolint:nilerr // the stream ended: nothing to answer
		}
		var out ferryv1.PushBatchResponse
		p.mu.Lock()
		if len(msg.Requests) > 1 {
			p.messages++
		}
		kill := first && len(msg.Requests) > 1 && !p.killed
		for i, req := range msg.Requests {
			if kill && i > 0 {
				p.killed, p.unsent = true, len(msg.Requests)-1
				break
			}
			p.steps[req.Tenant] = append(p.steps[req.Tenant], int(req.WriteRequest.Timeseries[0].Samples[0].Value))
			out.Responses = append(out.Responses, &ferryv1.PushResponse{RequestId: req.RequestId, Status: ferryv1.AckStatus_ACK_STATUS_OK})
		}
		p.mu.Unlock()
		if err := stream.SendMsg(&out); err != nil {
			return err
		}
		if kill {
			return status.Error(codes.Unavailable, "killed in the middle of a message")
		}
	}
}

// TestStreamKilledInTheMiddleOfAMessage kills the PushBatch stream after
// answering one request of a message: the message's other requests, and
// any other request waiting on that stream, fail and are sent again on
// the next stream, so every record is applied, in order, and committed.
func TestStreamKilledInTheMiddleOfAMessage(t *testing.T) {
	t.Parallel()
	const tenants, perTenant = 40, 10
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	produce(t, manualClient(t, b), topic, tenants, 1, 0, perTenant)

	p := &killingPusher{steps: map[string][]int{}}
	g := grpc.NewServer(codec.ServerOption())
	g.RegisterService(&killingPusherDesc, p)
	cfg := testConfig(b.Addrs(), topic, "0", serveGRPC(t, g))
	startConsumer(t, cfg)
	waitCommitted(t, b, cfg.ConsumerGroup, topic, 60*time.Second)

	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.killed || p.unsent == 0 {
		t.Fatalf("no message of several requests came to be killed (%d streams, %d messages of several requests)", p.streams, p.messages)
	}
	if p.streams < 2 {
		t.Errorf("%d streams, want another after the kill", p.streams)
	}
	checkSteps(t, p.steps, tenants, perTenant, nil)
	t.Logf("killed a message with %d requests unanswered; %d messages of several requests", p.unsent, p.messages)
}
