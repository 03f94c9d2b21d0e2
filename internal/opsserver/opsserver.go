// Package opsserver is the HTTP server every Ferry process runs beside its
// main work: /metrics for Prometheus, /healthz for liveness and /ready for
// readiness, plus whatever handlers the process adds.
package opsserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ferrylabs/ferry/internal/statuspage"
)

// ReadyFunc reports nil when the process can do its work, or why not.
type ReadyFunc func() error

// Server is the operations HTTP server.
type Server struct {
	Mux    *http.ServeMux
	srv    *http.Server
	lis    net.Listener
	logger *slog.Logger
}

// Listen binds addr and prepares the standard handlers. Binding early lets
// the caller fail fast on a taken port, before starting anything else.
// With cfg.TLS set the server serves TLS only.
func Listen(addr string, cfg Config, gatherer prometheus.Gatherer, ready ReadyFunc, logger *slog.Logger) (*Server, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	tlsCfg, err := cfg.TLS.TLSConfig("h2", "http/1.1")
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ready")
	})
	if cfg.EnablePprof {
		registerPprof(mux)
	}
	if tlsCfg != nil {
		lis = tls.NewListener(lis, tlsCfg)
	}
	return &Server{
		Mux: mux,
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: cfg.ReadHeaderTimeout,
			ReadTimeout:       cfg.ReadTimeout,
			WriteTimeout:      cfg.WriteTimeout,
			IdleTimeout:       cfg.IdleTimeout,
			// The server's own errors (TLS handshakes refused, say) go
			// to the process log at debug: a scanner must not flood it.
			ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
		},
		lis:    lis,
		logger: logger,
	}, nil
}

// registerPprof serves the runtime profiles under /debug/pprof/.
func registerPprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

// HandleStatus serves the process's status page at /: build is called
// for every request.
func (s *Server) HandleStatus(build func() statuspage.Page) {
	s.Mux.Handle("GET /{$}", statuspage.Handler(build, s.logger))
}

// Addr returns the bound address.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Run serves until ctx is done, then shuts down, giving open requests a few
// seconds to finish.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http shutdown: %w", err)
	}
	return nil
}

// NewRegistry returns a registry with the Go runtime and process
// collectors and ferry_build_info (version, revision, branch, Go version:
// the Prometheus convention, so a dashboard can tell which build answers),
// the base every Ferry process adds its own metrics to.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		versioncollector.NewCollector("ferry"),
	)
	return reg
}
