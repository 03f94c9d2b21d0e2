// Package app assembles the push service: flags, backend, gRPC service and
// the operations HTTP server, with one start/run/stop lifecycle. The
// ferry-pusher command, the all-in-one dev mode and the integration tests
// all run the pusher through it.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/ferrylabs/ferry/internal/logging"
	"github.com/ferrylabs/ferry/internal/opsserver"
	"github.com/ferrylabs/ferry/pusher"
	"github.com/ferrylabs/ferry/pusher/queryapi"
	"github.com/ferrylabs/ferry/pusher/remotewrite"
	"github.com/ferrylabs/ferry/pusher/tsdbstore"
)

// Backend names accepted by -pusher.backend.
const (
	BackendTSDB        = "tsdb"
	BackendDiscard     = "discard"
	BackendRemoteWrite = "remote-write"
)

// Config is the whole configuration of a pusher process.
type Config struct {
	Pusher            pusher.Config
	Log               logging.Config
	HTTPListenAddress string
	Backend           string
	TSDB              tsdbstore.Config
	Query             queryapi.Config
	RemoteWrite       remotewrite.Config
}

// RegisterFlags registers every flag of the process on f.
func (c *Config) RegisterFlags(f *flag.FlagSet) {
	c.Pusher.RegisterFlags(f)
	c.Log.RegisterFlags(f)
	f.StringVar(&c.HTTPListenAddress, "http.listen-address", ":8081", "Address of the HTTP server: /metrics, /healthz, /ready and, with the tsdb backend, the Prometheus query API under /api/v1/.")
	f.StringVar(&c.Backend, "pusher.backend", BackendTSDB, "Where requests are applied: 'tsdb' stores them in a Prometheus TSDB per tenant under -storage.path and serves the query API; 'remote-write' forwards them to the receiver at -remote-write.url (query the receiver); 'discard' validates and counts them and stores nothing (for load tests).")
	c.TSDB.RegisterFlags(f)
	c.Query.RegisterFlags(f)
	c.RemoteWrite.RegisterFlags(f)
}

// Validate reports the first invalid setting, naming its flag.
func (c *Config) Validate() error {
	if err := c.Pusher.Validate(); err != nil {
		return err
	}
	if err := c.Log.Validate(); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(c.HTTPListenAddress); err != nil {
		return fmt.Errorf("-http.listen-address %q: %w", c.HTTPListenAddress, err)
	}
	switch c.Backend {
	case BackendTSDB:
		if err := c.TSDB.Validate(); err != nil {
			return err
		}
		return c.Query.Validate()
	case BackendRemoteWrite:
		return c.RemoteWrite.Validate()
	case BackendDiscard:
		return nil
	default:
		return fmt.Errorf("-pusher.backend must be %q, %q or %q, got %q", BackendTSDB, BackendRemoteWrite, BackendDiscard, c.Backend)
	}
}

// Process is a started pusher: its listeners are bound and its backend is
// open; Run serves.
type Process struct {
	Backend  pusher.Backend
	Server   *pusher.Server
	grpc     *pusher.Service
	http     *opsserver.Server
	logger   *slog.Logger
	Registry *prometheus.Registry
}

// Start opens the backend and binds both listeners, so that a bad address or
// storage path fails before anything serves.
func Start(cfg Config, logger *slog.Logger) (*Process, error) {
	reg := opsserver.NewRegistry()
	backend, err := openBackend(cfg, logger, reg)
	if err != nil {
		return nil, err
	}
	srv := pusher.NewServer(cfg.Pusher, backend, logger, reg)
	svc, err := pusher.Listen(cfg.Pusher, srv, logger)
	if err != nil {
		return nil, errors.Join(err, backend.Close())
	}
	p := &Process{Backend: backend, Server: srv, grpc: svc, logger: logger, Registry: reg}
	p.http, err = opsserver.Listen(cfg.HTTPListenAddress, reg, func() error { return nil }, logger)
	if err != nil {
		return nil, errors.Join(err, backend.Close())
	}
	if store, ok := backend.(*tsdbstore.Store); ok {
		api, err := queryapi.New(cfg.Query, store, logger, reg)
		if err != nil {
			return nil, errors.Join(err, backend.Close())
		}
		api.Register(p.http.Mux)
	}
	return p, nil
}

func openBackend(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (pusher.Backend, error) {
	switch cfg.Backend {
	case BackendTSDB:
		tcfg := cfg.TSDB
		tcfg.CreationGracePeriod = cfg.Pusher.Limits.CreationGracePeriod
		store, err := tsdbstore.New(tcfg, logger, reg)
		if err != nil {
			return nil, fmt.Errorf("open tsdb backend: %w", err)
		}
		return store, nil
	case BackendRemoteWrite:
		rw, err := remotewrite.New(cfg.RemoteWrite, reg)
		if err != nil {
			return nil, fmt.Errorf("open remote-write backend: %w", err)
		}
		return rw, nil
	case BackendDiscard:
		return pusher.NewDiscard(), nil
	default:
		return nil, fmt.Errorf("unknown backend %q", cfg.Backend)
	}
}

// GRPCAddr is the bound gRPC address.
func (p *Process) GRPCAddr() string { return p.grpc.Addr() }

// HTTPAddr is the bound HTTP address.
func (p *Process) HTTPAddr() string { return p.http.Addr() }

// Run serves until ctx is done, stops gracefully and closes the backend.
func (p *Process) Run(ctx context.Context) error {
	p.logger.Info("pusher serving", "grpc", p.GRPCAddr(), "http", p.HTTPAddr())
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return p.grpc.Run(gctx) })
	g.Go(func() error { return p.http.Run(gctx) })
	err := g.Wait()
	if errors.Is(err, pusher.ErrHandlersStuck) {
		// Closing would wait for the stuck requests: leave it to the exit.
		p.logger.Error("exiting without closing the backend", "err", err)
		return err
	}
	if cerr := p.Backend.Close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("close backend: %w", cerr))
	}
	p.logger.Info("pusher stopped")
	return err
}

// Run starts a pusher logging to w and serves until ctx is done.
func Run(ctx context.Context, cfg Config, w io.Writer) error {
	logger := cfg.Log.New(w)
	p, err := Start(cfg, logger)
	if err != nil {
		return err
	}
	return p.Run(ctx)
}
