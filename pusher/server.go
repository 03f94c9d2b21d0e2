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

	"github.com/ferrylabs/ferry/internal/logging"
	"github.com/ferrylabs/ferry/internal/tenant"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/proto/wire"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// Server implements ferryv1.PusherServiceServer on top of a Backend.
type Server struct {
	ferryv1.UnimplementedPusherServiceServer

	cfg      Config
	backend  backend.Backend
	logger   *slog.Logger
	metrics  *metrics
	inflight chan struct{} // a slot per request being applied
	pending  *pending      // what all streams and calls hold unanswered
	now      func() time.Time
	// scan is Filter's label rules when the backend takes requests as
	// encoded (RawPusher) one at a time: requests are then first given
	// to wire.Decoder.Scan (envelope.decode). nil otherwise.
	scan *wire.LabelRules
	// pushOneCall is what PushOne's interceptors get (servicedesc.go).
	pushOneCall unaryCall

	// errLog rate-limits the logs of requests answered SERVER_ERROR, per
	// tenant.
	errLog *logging.Limiter

	draining atomic.Bool
	stopping chan struct{} // closed by Drain: stream handlers return
	once     sync.Once
	// streamsMu orders every streams.Add before Drain's streams.Wait:
	// a WaitGroup must not go up from zero while Wait is running.
	streamsMu sync.Mutex
	streams   sync.WaitGroup
}

// NewServer returns a server applying requests to backend. Metrics are
// registered on reg.
func NewServer(cfg Config, b backend.Backend, logger *slog.Logger, reg prometheus.Registerer) *Server {
	m := newMetrics(reg)
	s := &Server{
		cfg:      cfg,
		backend:  b,
		logger:   logger,
		metrics:  m,
		inflight: make(chan struct{}, cfg.MaxInflight),
		pending:  newPending(cfg.MaxPendingBytes, m),
		now:      time.Now,
		stopping: make(chan struct{}),
		errLog:   logging.NewLimiter(serverErrorLogInterval),
	}
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

// serverErrorLogInterval is how often the server errors of one tenant are
// logged at most: a failing disk fails every request, and the consumer
// retries each.
const serverErrorLogInterval = 10 * time.Second

// logServerError logs a request the backend answered SERVER_ERROR: at the
// default level, since it is the pusher's or its storage's failure and
// holds back the tenant's commits, but at most once per tenant per
// serverErrorLogInterval, with the count of those held back.
func (s *Server) logServerError(req *ferryv1.PushRequest, err error) {
	tenant := logging.Untrusted(req.Tenant)
	ok, suppressed := s.errLog.Allow(tenant)
	if !ok {
		return
	}
	s.logger.Error("request answered SERVER_ERROR: it is retried, and nothing past it is committed until it succeeds",
		"tenant", tenant, "partition", req.Partition, "offset", req.Offset,
		"cause", logging.Untrusted(fmt.Sprint(err)), "suppressed", suppressed)
}

// Push serves one consumer's stream. Requests are applied concurrently and
// each answer is sent as soon as its request is done. Sequenced requests
// (PushRequest.sequence set) of one tenant are applied one at a time in the
// order received, which lets the consumer keep several of a tenant's
// requests in flight; unsequenced ones are applied as they come.
func (s *Server) Push(stream ferryv1.PusherService_PushServer) error {
	var sendMu sync.Mutex
	var sendErr error
	// send answers each request in a message of its own and recycles its
	// memory: Send has encoded the answer when it returns, and the backend
	// is done with the request.
	send := func(rs []received, as []answered) {
		sendMu.Lock()
		for _, a := range as {
			if sendErr == nil {
				sendErr = stream.Send(a.resp)
			}
		}
		sendMu.Unlock()
		for _, r := range rs {
			r.recycle()
		}
	}
	return s.serve(stream, receive, send)
}

// handle answers one request received on a stream: a client error when its
// write request did not decode, a server error when the pusher is at its
// in-flight limit or draining, else the outcome of applying it.
func (s *Server) handle(ctx context.Context, r received) answered {
	if r.bad != nil {
		return s.unapplied(r.req, r.bad)
	}
	if !s.acquire() {
		return s.unapplied(r.req, s.refusal())
	}
	defer s.release()
	return s.applyRecovered(ctx, r.req, r.size, r.owner)
}

// refuse answers a stream's request with err without applying it, and
// counts the answer.
func (s *Server) refuse(req *ferryv1.PushRequest, err error) *ferryv1.PushResponse {
	return s.settle(req, s.unapplied(req, err))
}

// receive reads requests until the stream ends. It is a goroutine of its
// own so that Push can end the stream during shutdown while a read blocks.
// It reads a request only once the stream has a slot for it and decodes it
// only once the server has room for its bytes (see pending.go): while
// either waits the stream is not read, and flow control holds the client.
func receive(stream grpc.ServerStream, hold *streamHold, dec decoding, reqs chan<- received, errc chan<- error) {
	ctx := stream.Context()
	var env envelope
	for {
		if !hold.take(ctx) {
			errc <- ctx.Err()
			return
		}
		if err := stream.RecvMsg(&env); err != nil {
			hold.give()
			errc <- err
			return
		}
		if err := admit(ctx, hold, dec, &env, reqs, nil); err != nil {
			errc <- err
			return
		}
	}
}

// received is one request read from a stream; bad is set when its write
// request did not decode. A decoded request's memory is owner's: call
// recycle once its answer is sent, never earlier, since the backend's view
// of the request and the answer's reason may point into it.
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

// PushOne applies a single request. The service's own handler
// (servicedesc.go) calls pushOne instead, with the request still encoded;
// this method serves callers that hold a decoded request.
func (s *Server) PushOne(ctx context.Context, req *ferryv1.PushRequest) (*ferryv1.PushResponse, error) {
	size := req.WriteRequest.Size()
	cost := s.pending.cost(size)
	if !s.pending.tryAcquire(cost) {
		return s.answer(req, backend.Result{}, s.refusal()), nil
	}
	defer s.pending.release(cost)
	if !s.acquire() {
		return s.refuse(req, s.refusal()), nil
	}
	defer s.release()
	return s.apply(ctx, req, size, nil), nil
}

// pushOne answers a PushOne call whose write request is still encoded. It
// counts against the same bounds as a stream's requests but never waits
// for room: without it the answer is SERVER_ERROR with a retry-after hint,
// so a flood of calls cannot pile up in the server. The write request is
// decoded as a stream's are, under the limits.
func (s *Server) pushOne(ctx context.Context, env *envelope) *ferryv1.PushResponse {
	cost := s.pending.cost(len(env.WriteRequest))
	if !s.pending.tryAcquire(cost) {
		return s.refuse(&env.Request, s.refusal())
	}
	defer s.pending.release(cost)
	r := env.decode(s.decoding())
	resp := s.pushDecoded(ctx, r)
	// The answer is marshalled after we return, and its reason may quote
	// the request's pooled memory: it gets its own copy first.
	resp.Reason = strings.Clone(resp.Reason)
	r.recycle()
	return resp
}

// pushDecoded answers a PushOne call's decoded request.
func (s *Server) pushDecoded(ctx context.Context, r received) *ferryv1.PushResponse {
	if r.bad != nil {
		return s.refuse(r.req, r.bad)
	}
	if !s.acquire() {
		return s.refuse(r.req, s.refusal())
	}
	defer s.release()
	return s.apply(ctx, r.req, r.size, r.owner) // a panic is the recovery interceptor's
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

func (s *Server) acquire() bool {
	if s.draining.Load() {
		return false
	}
	select {
	case s.inflight <- struct{}{}:
		s.metrics.inflight.Inc()
		return true
	default:
		return false
	}
}

func (s *Server) release() {
	<-s.inflight
	s.metrics.inflight.Dec()
}

func (s *Server) refusal() error {
	if s.draining.Load() {
		return backend.ErrShuttingDown
	}
	return backend.ErrOverloaded
}

// errInternal answers a request whose processing panicked. A retry is the
// safe answer: skipping the request could lose data.
var errInternal = &backend.ServerError{Reason: "pusher: internal error"}

// applyRecovered is applyOne for the goroutines of a stream, which the gRPC
// recovery interceptor does not cover: a panic there would end the process.
// It becomes a SERVER_ERROR answer instead, without the panic value.
func (s *Server) applyRecovered(ctx context.Context, req *ferryv1.PushRequest, size int, p *pooledRequest) (a answered) {
	defer func() {
		if p := recover(); p != nil {
			s.logPanic(ctx, p, req)
			a = answered{resp: s.answer(req, backend.Result{}, errInternal), err: errInternal} // logged above
		}
	}()
	return s.applyOne(ctx, req, size, p)
}

// logPanic logs a panic while applying req.
func (s *Server) logPanic(ctx context.Context, p any, req *ferryv1.PushRequest) {
	s.logger.ErrorContext(ctx, "panic applying a request", "panic", p, "tenant", logging.Untrusted(req.Tenant),
		"partition", req.Partition, "offset", req.Offset)
}

// apply validates and applies one request and builds its answer, counted
// and logged. size is the encoded size of its write request: a stream
// knows it from the bytes it received, which saves walking every series
// again to compute it. p, when not nil, holds req as received: its
// encoding, and whether it was decoded (see pooledRequest).
func (s *Server) apply(ctx context.Context, req *ferryv1.PushRequest, size int, p *pooledRequest) *ferryv1.PushResponse {
	return s.settle(req, s.applyOne(ctx, req, size, p))
}

// applyOne is apply without counting and logging the answer.
func (s *Server) applyOne(ctx context.Context, req *ferryv1.PushRequest, size int, p *pooledRequest) answered {
	start := time.Now()
	res, err := s.process(ctx, req, size, p)
	return answered{resp: s.answer(req, res, err), err: err, took: time.Since(start), applied: true}
}

// process validates and applies one request, whose encoding p holds when
// it is not nil.
func (s *Server) process(ctx context.Context, req *ferryv1.PushRequest, size int, p *pooledRequest) (backend.Result, error) {
	if p != nil && p.scanned {
		return s.processScanned(ctx, req, size, p)
	}
	c, res, err := s.check(req, size)
	if err != nil {
		return res, err
	}
	var raw []byte
	whole := false
	if p != nil {
		raw, whole = p.buf, c.invalid == nil
	}
	res, err = s.push(ctx, req.Tenant, &req.WriteRequest, raw, whole)
	return c.merge(res, err)
}

// processScanned applies a request that wire.Decoder.Scan vouched for
// (envelope.decode) as it was received, without decoding it. Scan checked
// everything Filter checks but the time bounds, which move with the
// clock: a request with a sample outside them now is decoded and applied
// as any other, so that it gets Filter's answer.
func (s *Server) processScanned(ctx context.Context, req *ferryv1.PushRequest, size int, p *pooledRequest) (backend.Result, error) {
	samples := int64(p.sum.Samples)
	if !s.withinTimeBounds(p.sum) {
		if err := p.decodeWriteRequest(); err != nil {
			// Scan vouches that Decode accepts the bytes: this is a bug,
			// and a client error would skip data. Retrying is safe.
			return backend.Result{}, &backend.ServerError{Reason: "pusher: a scanned request did not decode: " + err.Error()}
		}
		return s.process(ctx, req, size, p)
	}
	if res, err := s.checkEnvelope(req, size, samples); err != nil {
		return res, err
	}
	return s.backend.(backend.RawPusher).PushRaw(ctx, req.Tenant, p.buf, samples)
}

// withinTimeBounds reports whether the samples Scan summed up in sum are
// all within the limits' time bounds now.
func (s *Server) withinTimeBounds(sum wire.Summary) bool {
	if sum.Samples == 0 {
		return true
	}
	minTs, maxTs := s.cfg.Limits.TimeBounds(s.now())
	return sum.MinTime >= minTs && sum.MaxTime <= maxTs
}

// checked is what validation found in a request it lets through to the
// backend: the samples it removed, and the client error naming the first.
type checked struct {
	rejected int64
	invalid  *backend.ClientError // nil when nothing was invalid
}

// check validates req, whose write request is size bytes encoded. A request
// it refuses whole is returned with its counts and client error; otherwise
// what validation removed from it.
func (s *Server) check(req *ferryv1.PushRequest, size int) (checked, backend.Result, error) {
	if res, err := s.checkEnvelope(req, size, backend.Count(&req.WriteRequest)); err != nil {
		return checked{}, res, err
	}
	rejected, invalid := s.cfg.Limits.Filter(&req.WriteRequest, s.now())
	// A bad series without samples rejects none, yet the received bytes
	// still hold it: they are whole only when nothing was invalid.
	return checked{rejected: rejected, invalid: invalid}, backend.Result{}, nil
}

// checkEnvelope refuses a request of total samples whose tenant or size
// is not allowed, whatever its write request holds.
func (s *Server) checkEnvelope(req *ferryv1.PushRequest, size int, total int64) (backend.Result, error) {
	if req.Tenant == "" {
		return backend.Result{Rejected: total}, backend.NewClientError("empty tenant: the Kafka record key must name the tenant")
	}
	if err := tenant.Validate(req.Tenant); err != nil {
		return backend.Result{Rejected: total}, backend.NewClientError("the Kafka record key must be a tenant ID: %v", err)
	}
	if size > s.cfg.MaxRequestBytes {
		return backend.Result{Rejected: total}, backend.NewClientError("request of %d bytes is larger than the limit of %d", size, s.cfg.MaxRequestBytes)
	}
	return backend.Result{}, nil
}

// merge completes the backend's outcome of a checked request with what
// validation removed from it.
func (c checked) merge(res backend.Result, err error) (backend.Result, error) {
	res.Rejected += c.rejected
	if err != nil {
		if !backend.IsClientError(err) {
			// A server error applies to the whole request: it is retried.
			return backend.Result{}, err
		}
		return res, err
	}
	if c.invalid != nil {
		return res, c.invalid
	}
	return res, nil
}

// push hands a request to the backend, as its received bytes raw when
// the backend takes them and they are whole: received (not PushOne's
// decoded request), and left as they were by validation.
func (s *Server) push(ctx context.Context, tenant string, wr *prompb.WriteRequest, raw []byte, whole bool) (backend.Result, error) {
	if rp, ok := s.backend.(backend.RawPusher); ok && whole {
		return rp.PushRaw(ctx, tenant, raw, backend.Count(wr))
	}
	return s.backend.Push(ctx, tenant, wr)
}

// answer turns a request's outcome into its acknowledgement.
func (s *Server) answer(req *ferryv1.PushRequest, res backend.Result, err error) *ferryv1.PushResponse {
	class, retryAfter := backend.Classify(err)
	resp := &ferryv1.PushResponse{
		RequestId:       req.RequestId,
		Status:          ackStatus(class),
		AcceptedSamples: res.Accepted,
		RejectedSamples: res.Rejected,
		RetryAfterMs:    retryAfter.Milliseconds(),
	}
	if err != nil {
		resp.Reason = err.Error()
		if class == backend.ClassClient {
			resp.Reason = fmt.Sprintf("%s (%d accepted, %d rejected)", resp.Reason, res.Accepted, res.Rejected)
		}
	}
	return resp
}

// Register adds the service to a gRPC server.
func (s *Server) Register(g *grpc.Server) {
	g.RegisterService(&serviceDesc, s)
}
