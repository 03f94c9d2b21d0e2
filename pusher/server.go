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
// owns the service's surface: the streams (stream.go, batchstream.go),
// PushOne, Sync, and the drain; what happens to one request is its
// applier's.
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
	// pushOneCall is what PushOne's interceptors get (servicedesc.go).
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

// pushOne answers a PushOne call, whose write request is still encoded
// (servicedesc.go). It counts against the same bounds as a stream's
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

// maxSyncTenants is the most tenants a Sync may name for the backend to
// sync them alone; a longer list (a consumer names at most 10,000) is
// served by syncing every tenant, which is bounded by the open tenants
// where a list is bounded only by the message size.
const maxSyncTenants = 10_000

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
