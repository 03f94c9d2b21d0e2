package pusher

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/wire"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// Server implements ferryv1.PusherServiceServer on top of a Backend. It
// owns the service's surface: its registration with handlers of our own
// (serviceDesc, here), the streams (stream.go; their readers and answers
// in outbox.go), PushOne, Sync, and the drain; what happens to one
// request is its applier's (apply.go).
type Server struct {
	ferryv1.UnimplementedPusherServiceServer

	cfg     Config
	backend backend.Backend
	logger  *slog.Logger
	metrics *metrics
	applier *applier
	pending *pending // what all streams and calls hold unanswered
	// scan is Filter's label rules when the backend takes requests as
	// encoded (RawPusher) one at a time: requests are then first given
	// to wire.Decoder.Scan (envelope.decode). nil otherwise.
	scan *wire.LabelRules
	// pushOneCall is what PushOne's interceptors get (pushOneHandler).
	pushOneCall unaryCall

	draining atomic.Bool
	stopping chan struct{} // closed by Drain: stream handlers return
	once     sync.Once
	// streamsMu orders every streams.Add before Drain's streams.Wait:
	// a WaitGroup must not go up from zero while Wait is running.
	streamsMu sync.Mutex
	streams   sync.WaitGroup
}

// NewServer returns a server applying requests to b. Metrics are
// registered on reg.
func NewServer(cfg Config, b backend.Backend, logger *slog.Logger, reg prometheus.Registerer) *Server {
	m := newMetrics(reg)
	s := &Server{
		cfg:      cfg,
		backend:  b,
		logger:   logger,
		metrics:  m,
		pending:  newPending(cfg.MaxPendingBytes, m),
		stopping: make(chan struct{}),
	}
	s.applier = newApplier(cfg, b, logger, m, &s.draining)
	s.pushOneCall = newPushOneCall(s)
	s.scan = scanRules(cfg, b)
	return s
}

// scanRules returns the label rules for wire.Decoder.Scan when backend
// takes requests as encoded, nil when it needs them decoded anyway. A
// backend that batches gets its requests decoded: PushBatch takes them so.
func scanRules(cfg Config, b backend.Backend) *wire.LabelRules {
	_, raw := b.(backend.RawPusher)
	_, batches := b.(backend.BatchPusher)
	if !raw || batches {
		return nil
	}
	rules := cfg.Limits.LabelRules()
	return &rules
}

// serviceDesc registers the Pusher service with handlers of our own
// rather than the generated ones, for one reason: the generated PushOne
// handler decodes the whole request with the generated decoder before the
// server sees it, and that decoder turns a 4 MiB request of empty series
// into 740 MB. Ours reads PushOne's envelope first and decodes its write
// request with wire.Decoder under the limits, as a stream does. Push,
// PushBatch and Sync are what the generated handlers do.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*ferryv1.PusherServiceServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "PushOne", Handler: pushOneHandler},
		{MethodName: "Sync", Handler: syncHandler},
	},
	Streams: []grpc.StreamDesc{
		{StreamName: "Push", Handler: pushHandler, ServerStreams: true, ClientStreams: true},
		{StreamName: "PushBatch", Handler: pushBatchHandler, ServerStreams: true, ClientStreams: true},
	},
	Metadata: "ferry/v1/pusher.proto",
}

func pushHandler(srv any, stream grpc.ServerStream) error {
	return srv.(*Server).Push(pushStream{stream})
}

// pushStream is a Push stream as PusherService_PushServer.
type pushStream struct{ grpc.ServerStream }

func (x pushStream) Send(m *ferryv1.PushResponse) error { return x.SendMsg(m) }

func (x pushStream) Recv() (*ferryv1.PushRequest, error) {
	m := new(ferryv1.PushRequest)
	if err := x.RecvMsg(m); err != nil {
		return nil, err
	}
	return m, nil
}

func pushBatchHandler(srv any, stream grpc.ServerStream) error {
	return srv.(*Server).PushBatch(pushBatchStream{stream})
}

// pushBatchStream is a PushBatch stream as PusherService_PushBatchServer.
// The server reads and writes its messages with RecvMsg and SendMsg (see
// readBatches, writeBatches); Send and Recv complete the interface.
type pushBatchStream struct{ grpc.ServerStream }

func (x pushBatchStream) Send(m *ferryv1.PushBatchResponse) error { return x.SendMsg(m) }

func (x pushBatchStream) Recv() (*ferryv1.PushBatchRequest, error) {
	m := new(ferryv1.PushBatchRequest)
	if err := x.RecvMsg(m); err != nil {
		return nil, err
	}
	return m, nil
}

func pushOneHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) { //nolint:revive // grpc.MethodHandler's signature
	// The envelope is pooled, as a stream keeps one for all its requests:
	// its encoded write request goes on in a pooledRequest, and it takes
	// that one's previous buffer for the next call to read into.
	env := envelopePool.Get().(*envelope)
	defer releaseEnvelope(env)
	if err := dec(env); err != nil {
		return nil, err
	}
	s := srv.(*Server)
	if interceptor == nil {
		return s.pushOneCall.handler(ctx, env)
	}
	return interceptor(ctx, env, &s.pushOneCall.info, s.pushOneCall.handler)
}

// unaryCall is what a server passes its interceptors for every call of a
// unary method, built once per server instead of per call.
type unaryCall struct {
	info    grpc.UnaryServerInfo
	handler grpc.UnaryHandler
}

// newPushOneCall is PushOne's unaryCall for s.
func newPushOneCall(s *Server) unaryCall {
	return unaryCall{
		info: grpc.UnaryServerInfo{Server: s, FullMethod: "/" + serviceName + "/PushOne"},
		handler: func(ctx context.Context, req any) (any, error) {
			return s.pushOne(ctx, req.(*envelope)), nil
		},
	}
}

// pushOne answers a PushOne call, whose write request is still encoded
// (pushOneHandler). It counts against the same bounds as a stream's
// requests but never waits for room: without it the answer is
// SERVER_ERROR with a retry-after hint, so a flood of calls cannot pile up
// in the server. The write request is decoded as a stream's are, under
// the limits. A panic is the recovery interceptor's.
func (s *Server) pushOne(ctx context.Context, env *envelope) *ferryv1.PushResponse {
	a := s.applier
	cost := s.pending.cost(len(env.WriteRequest))
	if !s.pending.tryAcquire(cost) {
		return a.settle(&env.Request, a.unapplied(&env.Request, a.refusal()))
	}
	defer s.pending.release(cost)
	r := env.decode(s.decoding())
	resp := a.settle(r.req, a.handle(ctx, r))
	// The answer is marshalled after we return, and its reason may quote
	// the request's pooled memory: it gets its own copy first.
	resp.Reason = strings.Clone(resp.Reason)
	r.recycle()
	return resp
}

var envelopePool = sync.Pool{New: func() any { return new(envelope) }}

// releaseEnvelope returns a PushOne call's envelope to the pool once the
// call, interceptors included, is done with it.
func releaseEnvelope(env *envelope) {
	if cap(env.WriteRequest) > maxPooledBytes {
		return
	}
	env.Request = ferryv1.PushRequest{}
	env.WriteRequest = env.WriteRequest[:0]
	envelopePool.Put(env)
}

// maxSyncTenants is the most tenants a Sync may name for the backend to
// sync them alone; a longer list (a consumer names at most 10,000) is
// served by syncing every tenant, which is bounded by the open tenants
// where a list is bounded only by the message size.
const maxSyncTenants = 10_000

func syncHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) { //nolint:revive // grpc.MethodHandler's signature
	in := new(ferryv1.SyncRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	s := srv.(*Server)
	handler := func(ctx context.Context, req any) (any, error) { return s.Sync(ctx, req.(*ferryv1.SyncRequest)) }
	if interceptor == nil {
		return handler(ctx, in)
	}
	return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + serviceName + "/Sync"}, handler)
}

// Sync makes everything acknowledged before the call durable: for the
// tenants the request names when the backend can sync some tenants alone,
// else for all.
func (s *Server) Sync(ctx context.Context, req *ferryv1.SyncRequest) (*ferryv1.SyncResponse, error) {
	start := time.Now()
	var n int
	var err error
	if ts, ok := s.backend.(backend.TenantSyncer); ok && len(req.GetTenants()) > 0 && len(req.Tenants) <= maxSyncTenants {
		n, err = ts.SyncTenants(ctx, req.Tenants)
	} else {
		n, err = s.backend.Sync(ctx)
	}
	s.metrics.syncDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		s.logger.Error("sync failed", "err", err)
		return nil, status.Errorf(codes.Unavailable, "pusher: sync: %v", err)
	}
	return &ferryv1.SyncResponse{Tenants: int32(n)}, nil //nolint:gosec // tenant counts are far below 2^31
}

// Drain makes the server refuse new requests with SERVER_ERROR and end its
// streams once their in-flight requests are answered. It returns when every
// stream has ended or ctx is done.
func (s *Server) Drain(ctx context.Context) error {
	s.once.Do(func() {
		s.streamsMu.Lock()
		s.draining.Store(true)
		s.streamsMu.Unlock()
		close(s.stopping)
	})
	done := make(chan struct{})
	go func() { s.streams.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pusher: drain: %w", ctx.Err())
	}
}

// Ready reports ErrShuttingDown once the server drains: /ready must fail
// so that no new consumer picks this pusher while it stops.
func (s *Server) Ready() error {
	if s.draining.Load() {
		return backend.ErrShuttingDown
	}
	return nil
}

// enterStream counts a new stream, unless the server is draining.
func (s *Server) enterStream() bool {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	if s.draining.Load() {
		return false
	}
	s.streams.Add(1)
	return true
}

// Register adds the service to a gRPC server.
func (s *Server) Register(g *grpc.Server) {
	g.RegisterService(&serviceDesc, s)
}
