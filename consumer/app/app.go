// Package app assembles the consumer process: flags, the consumer and the
// operations HTTP server, with one start/run/stop lifecycle. The
// ferry-consumer command, the all-in-one dev mode and the integration tests
// all run consumers through it.
package app

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/ferrylabs/ferry/consumer"
	"github.com/ferrylabs/ferry/internal/logging"
	"github.com/ferrylabs/ferry/internal/opsserver"
)

// Config is the whole configuration of a consumer process.
type Config struct {
	Consumer          consumer.Config
	Log               logging.Config
	HTTPListenAddress string
	HTTP              opsserver.Config
}

// RegisterFlags registers every flag of the process on f.
func (c *Config) RegisterFlags(f *flag.FlagSet) {
	c.Consumer.RegisterFlags(f)
	c.Log.RegisterFlags(f)
	f.StringVar(&c.HTTPListenAddress, "http.listen-address", ":8080", "Address of the HTTP server: the status page at /, /metrics, /healthz and /ready.")
	c.HTTP.RegisterFlags(f)
}

// Validate reports the first invalid setting, naming its flag.
func (c *Config) Validate() error {
	if err := c.Consumer.Validate(); err != nil {
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

// Process is a consumer with its HTTP server bound.
type Process struct {
	Consumer *consumer.Consumer
	Registry *prometheus.Registry
	http     *opsserver.Server
	logger   *slog.Logger
}

// Start builds the consumer and binds the HTTP listener.
func Start(cfg Config, logger *slog.Logger) (*Process, error) {
	reg := opsserver.NewRegistry()
	c, err := consumer.New(cfg.Consumer, logger, reg)
	if err != nil {
		return nil, err
	}
	srv, err := opsserver.Listen(cfg.HTTPListenAddress, cfg.HTTP, reg, c.Ready, logger)
	if err != nil {
		return nil, err
	}
	srv.HandleStatus(c.StatusPage)
	return &Process{Consumer: c, Registry: reg, http: srv, logger: logger}, nil
}

// HTTPAddr is the bound HTTP address.
func (p *Process) HTTPAddr() string { return p.http.Addr() }

// Run consumes until ctx is done and stops gracefully.
func (p *Process) Run(ctx context.Context) error {
	p.logger.Info("consumer starting", "http", p.HTTPAddr())
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return p.Consumer.Run(gctx) })
	g.Go(func() error { return p.http.Run(gctx) })
	return g.Wait()
}

// Run starts a consumer logging to w and runs it until ctx is done.
func Run(ctx context.Context, cfg Config, w io.Writer) error {
	p, err := Start(cfg, cfg.Log.New(w))
	if err != nil {
		return err
	}
	return p.Run(ctx)
}
