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
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/ferrylabs/ferry/internal/logging"
	"github.com/ferrylabs/ferry/internal/opsserver"
	"github.com/ferrylabs/ferry/internal/statuspage"
	"github.com/ferrylabs/ferry/internal/tenantauth"
	"github.com/ferrylabs/ferry/pusher"
	"github.com/ferrylabs/ferry/pusher/backend"
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
	HTTP              opsserver.Config
	Auth              tenantauth.Config
	Backend           string
	TSDB              tsdbstore.Config
	Query             queryapi.Config
	RemoteWrite       remotewrite.Config
}

// RegisterFlags registers every flag of the process on f.
func (c *Config) RegisterFlags(f *flag.FlagSet) {
	c.Pusher.RegisterFlags(f)
	c.Log.RegisterFlags(f)
	f.StringVar(&c.HTTPListenAddress, "http.listen-address", ":8081", "Address of the HTTP server: the status page at /, /metrics, /healthz, /ready and, with the tsdb backend, the Prometheus query API under /api/v1/.")
	f.StringVar(&c.Backend, "pusher.backend", BackendTSDB, "Where requests are applied: 'tsdb' stores them in a Prometheus TSDB per tenant under -storage.path and serves the query API; 'remote-write' forwards them to the receiver at -remote-write.url (query the receiver); 'discard' validates and counts them and stores nothing (for load tests).")
	c.HTTP.RegisterFlags(f)
	c.Auth.RegisterFlags(f)
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
	if err := c.HTTP.Validate(); err != nil {
		return err
	}
	switch c.Backend {
	case BackendTSDB:
		if err := c.TSDB.Validate(); err != nil {
			return err
		}
		if c.HTTP.WriteTimeout <= c.Query.Timeout {
			return fmt.Errorf("-http.write-timeout (%s) must exceed -query.timeout (%s): a query's answer is written after it is evaluated", c.HTTP.WriteTimeout, c.Query.Timeout)
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
	Backend  backend.Backend
	Server   *pusher.Server
	grpc     *pusher.Service
	http     *opsserver.Server
	logger   *slog.Logger
	Registry *prometheus.Registry
}

// Start opens the backend and binds both listeners, so that a bad address or
// storage path fails before anything serves.
func Start(cfg Config, logger *slog.Logger) (*Process, error) {
	var auth *tenantauth.Authenticator
	if cfg.Auth.Enabled() {
		var err error
		if auth, err = tenantauth.New(cfg.Auth, logger); err != nil {
			return nil, err
		}
	}
	reg := opsserver.NewRegistry()
	be, err := openBackend(cfg, logger, reg)
	if err != nil {
		return nil, err
	}
	srv := pusher.NewServer(cfg.Pusher, be, logger, reg)
	svc, err := pusher.Listen(cfg.Pusher, srv, logger)
	if err != nil {
		return nil, errors.Join(err, be.Close())
	}
	p := &Process{Backend: be, Server: srv, grpc: svc, logger: logger, Registry: reg}
	p.http, err = opsserver.Listen(cfg.HTTPListenAddress, cfg.HTTP, reg, p.ready, logger)
	if err != nil {
		return nil, errors.Join(err, be.Close())
	}
	p.http.HandleStatus(func() statuspage.Page { return p.statusPage(cfg) })
	// The query API needs a backend that keeps data it can query.
	if q, ok := be.(backend.Querier); ok {
		api, err := queryapi.New(cfg.Query, q, logger, reg)
		if err != nil {
			return nil, errors.Join(err, be.Close())
		}
		registerQueryAPI(p.http.Mux, api, auth)
	}
	return p, nil
}

// readyChecker is a backend that can tell whether it can take writes: the
// TSDB store fails while its storage is gone or read-only.
type readyChecker interface {
	Ready() error
}

// ready is /ready's check, and the status page's: the server must not be
// draining, and the backend, when it can tell, must be able to write.
func (p *Process) ready() error {
	if err := p.Server.Ready(); err != nil {
		return err
	}
	if rc, ok := p.Backend.(readyChecker); ok {
		return rc.Ready()
	}
	return nil
}

// registerQueryAPI serves the query API under /api/v1/, behind auth when
// -auth.tenants-file is set (auth not nil). /metrics and /ready stay
// outside it, open to Prometheus.
func registerQueryAPI(mux *http.ServeMux, api *queryapi.API, auth *tenantauth.Authenticator) {
	if auth == nil {
		api.Register(mux)
		return
	}
	inner := http.NewServeMux()
	api.Register(inner)
	mux.Handle("/api/v1/", auth.Wrap(inner))
}

func openBackend(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (backend.Backend, error) {
	switch cfg.Backend {
	case BackendTSDB:
		tcfg := cfg.TSDB
		tcfg.CreationGracePeriod = cfg.Pusher.Limits.CreationGracePeriod
		tcfg.PastGracePeriod = cfg.Pusher.Limits.PastGracePeriod
		store, err := tsdbstore.New(tcfg, logger, reg)
		if err != nil {
			return nil, fmt.Errorf("open tsdb backend: %w", err)
		}
		return store, nil
	case BackendRemoteWrite:
		if cfg.RemoteWrite.MaxIdleConns != 0 {
			// Accepted so that existing command lines keep starting, but
			// said out loud: a flag that silently does nothing misleads.
			logger.Warn("-remote-write.max-idle-conns is deprecated and ignored: the client keeps up to 1000 idle connections to the receiver")
		}
		rw, err := remotewrite.New(cfg.RemoteWrite, reg)
		if err != nil {
			return nil, fmt.Errorf("open remote-write backend: %w", err)
		}
		return rw, nil
	case BackendDiscard:
		return backend.NewDiscard(), nil
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
