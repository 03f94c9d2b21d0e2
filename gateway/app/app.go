// Package app assembles the gateway process: flags, the remote-write
// handler with its Kafka producer, and the HTTP server that serves it
// beside /metrics, /healthz and /ready, with one start/run/stop lifecycle.
// The ferry-gateway command runs it; the all-in-one dev mode and tests
// embed it (Config.Gateway.ClientOpts points it at an in-process Kafka).
package app

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrylabs/ferry/gateway"
	"github.com/ferrylabs/ferry/internal/logging"
	"github.com/ferrylabs/ferry/internal/opsserver"
)

// Config is the whole configuration of a gateway process.
type Config struct {
	Gateway           gateway.Config
	Log               logging.Config
	HTTPListenAddress string
	HTTP              opsserver.Config
}

// RegisterFlags registers every flag of the process on f.
func (c *Config) RegisterFlags(f *flag.FlagSet) {
	c.Gateway.RegisterFlags(f)
	c.Log.RegisterFlags(f)
	f.StringVar(&c.HTTPListenAddress, "http.listen-address", ":8090", "Address of the HTTP server: the remote-write endpoints /api/v1/push and /api/v1/write, and /metrics, /healthz and /ready.")
	c.HTTP.RegisterFlags(f)
}

// Validate reports the first invalid setting, naming its flag.
func (c *Config) Validate() error {
	if err := c.Gateway.Validate(); err != nil {
		return err
	}
	if err := c.Log.Validate(); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(c.HTTPListenAddress); err != nil {
		return fmt.Errorf("-http.listen-address %q: %w", c.HTTPListenAddress, err)
	}
	return c.HTTP.Validate()
}

// Process is a gateway with its HTTP listener bound.
type Process struct {
	Gateway  *gateway.Gateway
	Registry *prometheus.Registry
	http     *opsserver.Server
	logger   *slog.Logger
}

// Start builds the gateway and binds the HTTP listener, so that a taken
// port fails before anything serves.
func Start(cfg Config, logger *slog.Logger) (*Process, error) {
	reg := opsserver.NewRegistry()
	g, err := gateway.New(cfg.Gateway, logger, reg)
	if err != nil {
		return nil, err
	}
	srv, err := opsserver.Listen(cfg.HTTPListenAddress, cfg.HTTP, reg, g.Ready, logger)
	if err != nil {
		g.Close()
		return nil, err
	}
	g.Register(srv.Mux)
	return &Process{Gateway: g, Registry: reg, http: srv, logger: logger}, nil
}

// HTTPAddr is the bound HTTP address.
func (p *Process) HTTPAddr() string { return p.http.Addr() }

// Run serves until ctx is done, lets open requests finish, then closes the
// Kafka client.
func (p *Process) Run(ctx context.Context) error {
	p.logger.Info("gateway serving", "http", p.HTTPAddr())
	err := p.http.Run(ctx)
	p.Gateway.Close()
	p.logger.Info("gateway stopped")
	return err
}

// Run starts a gateway logging to w and serves until ctx is done.
func Run(ctx context.Context, cfg Config, w io.Writer) error {
	p, err := Start(cfg, cfg.Log.New(w))
	if err != nil {
		return err
	}
	return p.Run(ctx)
}
