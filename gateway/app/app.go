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
	"os"
	"runtime/debug"

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

// Run starts a gateway logging to w and serves until ctx is done. It is
// the binary's: it also sets Go's memory limit (setMemoryLimit).
func Run(ctx context.Context, cfg Config, w io.Writer) error {
	logger := cfg.Log.New(w)
	setMemoryLimit(cfg.Gateway.MaxInflightBytes, logger)
	p, err := Start(cfg, logger)
	if err != nil {
		return err
	}
	return p.Run(ctx)
}

// memoryLimitBase is what the gateway uses beside its requests: the
// runtime, the Kafka client, pooled buffers.
const memoryLimitBase = 64 << 20

// setMemoryLimit sets Go's soft memory limit to one and a half times the
// in-flight bytes plus memoryLimitBase, unless GOMEMLIMIT sets one. What
// requests hold is bounded by -gateway.max-inflight-bytes before it is
// allocated, so the live heap stays under the limit; the limit makes the
// collector run, and return memory to the system, before garbage takes
// the process further (the collector's own goal, twice the live heap,
// counts neither garbage not yet returned nor the peaks between
// collections: at 256 MiB the process reached 778 MiB without the limit).
func setMemoryLimit(inflight int64, logger *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	limit := inflight + inflight/2 + memoryLimitBase
	debug.SetMemoryLimit(limit)
	logger.Debug("memory limit set", "bytes", limit)
}
