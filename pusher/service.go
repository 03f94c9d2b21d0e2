package pusher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ferrylabs/ferry/proto/codec"
)

// Service is the push service's gRPC side: the Pusher service, health and
// reflection on one listener.
type Service struct {
	cfg    Config
	server *Server
	grpc   *grpc.Server
	health *health.Server
	lis    net.Listener
	logger *slog.Logger
}

// streamWorkers is the number of goroutines kept to run calls (see
// grpc.NumStreamWorkers): enough for the consumers' streams and the unary
// calls a CPU can serve at once, idle ones costing only their stacks.
func streamWorkers() uint32 {
	return uint32(4 * runtime.GOMAXPROCS(0)) //nolint:gosec // GOMAXPROCS is far below 2^30
}

// Listen binds the gRPC address and builds the server around s.
func Listen(cfg Config, s *Server, logger *slog.Logger) (*Service, error) {
	creds := insecure.NewCredentials()
	if tc, err := cfg.TLS.TLSConfig("h2"); err != nil {
		return nil, err
	} else if tc != nil {
		creds = credentials.NewTLS(tc)
	}
	lis, err := net.Listen("tcp", cfg.GRPCListenAddress)
	if err != nil {
		return nil, fmt.Errorf("grpc listen on %s: %w", cfg.GRPCListenAddress, err)
	}
	conns := newConnGate(cfg.MaxConnections, s.metrics.transport)
	streams := newStreamGate(cfg.MaxOpenStreams, conns, s.metrics.transport)
	lis = conns.listen(lis)
	opts := append(cfg.transportOptions(), grpc.Creds(conns.credentials(creds)))
	// The gate's interceptors come first in their chains.
	opts = append(opts, streams.serverOptions()...)
	opts = append(opts,
		codec.ServerOption(),
		// Calls run on goroutines that serve one call after another, which
		// keep the stack a call needs: a goroutine per call, gRPC's
		// default, starts small and grows and copies its stack on every
		// unary call (7% of a PushOne's CPU in a profile). Push streams
		// hold a worker for their lifetime; when all are busy a call gets
		// a goroutine of its own, as without workers.
		grpc.NumStreamWorkers(streamWorkers()),
		grpc.ChainUnaryInterceptor(
			s.metrics.grpc.UnaryServerInterceptor(),
			unaryCallLog(logger),
			recovery.UnaryServerInterceptor(recovery.WithRecoveryHandlerContext(recoverPanic(logger))),
		),
		grpc.ChainStreamInterceptor(
			s.metrics.grpc.StreamServerInterceptor(),
			logging.StreamServerInterceptor(eventLogger(logger), logging.WithLogOnEvents(logging.StartCall, logging.FinishCall)),
			recovery.StreamServerInterceptor(recovery.WithRecoveryHandlerContext(recoverPanic(logger))),
		),
	)
	g := grpc.NewServer(opts...)
	s.Register(g)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)
	if err := RegisterReflection(g); err != nil {
		_ = lis.Close()
		return nil, err
	}
	// Every method is reported from the start, at zero, so rates and
	// alerts see it before its first call.
	s.metrics.grpc.InitializeMetrics(g)
	return &Service{cfg: cfg, server: s, grpc: g, health: hs, lis: lis, logger: logger}, nil
}

// Addr returns the bound gRPC address.
func (svc *Service) Addr() string { return svc.lis.Addr().String() }

// Run serves until ctx is done, then stops gracefully: refuse new requests,
// answer the ones in flight, end the streams, and cut whatever is left when
// the shutdown timeout expires.
func (svc *Service) Run(ctx context.Context) error {
	svc.logger.Info("gRPC memory bounded", "max_open_streams", svc.cfg.MaxOpenStreams,
		"max_message_bytes", svc.cfg.maxRecvMsgSize(), "bound_mib", svc.cfg.MemoryBound()>>20)
	svc.setServing(healthpb.HealthCheckResponse_SERVING)
	errc := make(chan error, 1)
	go func() { errc <- svc.grpc.Serve(svc.lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("grpc serve: %w", err)
	case <-ctx.Done():
	}
	svc.setServing(healthpb.HealthCheckResponse_NOT_SERVING)
	svc.logger.Info("stopping: draining in-flight requests", "timeout", svc.cfg.ShutdownTimeout)
	stopCtx, cancel := context.WithTimeout(context.Background(), svc.cfg.ShutdownTimeout)
	defer cancel()
	if err := svc.server.Drain(stopCtx); err != nil {
		svc.logger.Warn("drain did not finish in time", "err", err)
	}
	stopped := make(chan struct{})
	go func() { svc.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
		return nil
	case <-stopCtx.Done():
	}
	svc.logger.Warn("graceful stop timed out: closing connections")
	svc.grpc.Stop()
	// Stop cancels the handlers' contexts but still waits for them; a
	// backend that ignores its context would hold the process forever.
	select {
	case <-stopped:
		return nil
	case <-time.After(stuckHandlerGrace):
		return ErrHandlersStuck
	}
}

// stuckHandlerGrace is how long Run waits for handlers after the forced
// stop cancelled their contexts.
const stuckHandlerGrace = 5 * time.Second

// ErrHandlersStuck is returned by Service.Run when requests were still
// being applied after the shutdown timeout and the forced stop: the
// backend ignores cancellation. The process should exit without closing
// the backend, which would wait for those requests too; what was
// acknowledged before is in the WAL.
var ErrHandlersStuck = errors.New("pusher: requests still being applied after the forced stop")

func (svc *Service) setServing(st healthpb.HealthCheckResponse_ServingStatus) {
	svc.health.SetServingStatus("", st)
	svc.health.SetServingStatus(serviceName, st)
}

// recoverPanic turns a panic in a handler into a short Internal error. The
// middleware's default would send the panic value, and with it internals, to
// the client.
func recoverPanic(l *slog.Logger) recovery.RecoveryHandlerFuncContext {
	return func(ctx context.Context, p any) error {
		l.ErrorContext(ctx, "panic in gRPC handler", "panic", p)
		return status.Error(codes.Internal, "pusher: internal error")
	}
}

// serviceName is the full name of the Pusher service, for health checks.
const serviceName = "ferry.v1.PusherService"
