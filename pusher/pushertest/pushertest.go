// Package pushertest runs a real push service — the Pusher gRPC service,
// health and reflection, on a loopback listener — around any Backend, for
// the tests of its clients. Tests give it a BackendFunc to script the
// answers.
package pushertest

import (
	"context"
	"flag"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// BackendFunc is a backend.Backend made of functions. A nil PushFunc
// accepts everything; a nil SyncFunc succeeds. Like any backend, a PushFunc
// may read the request only until it returns: a stream reuses the request's
// memory afterwards, so a PushFunc that records requests records a copy
// (Marshal and Unmarshal it, or clone what it keeps).
type BackendFunc struct {
	PushFunc func(ctx context.Context, tenant string, req *prompb.WriteRequest) (backend.Result, error)
	SyncFunc func(ctx context.Context) (int, error)
}

// Push calls PushFunc.
func (b BackendFunc) Push(ctx context.Context, tenant string, req *prompb.WriteRequest) (backend.Result, error) {
	if b.PushFunc == nil {
		return backend.Result{Accepted: backend.Count(req)}, nil
	}
	return b.PushFunc(ctx, tenant, req)
}

// Sync calls SyncFunc.
func (b BackendFunc) Sync(ctx context.Context) (int, error) {
	if b.SyncFunc == nil {
		return 0, nil
	}
	return b.SyncFunc(ctx)
}

// Close does nothing.
func (BackendFunc) Close() error { return nil }

// stopTimeout bounds how long the end of a test waits for the service.
const stopTimeout = 30 * time.Second

// Serve runs the push service around backend on addr ("127.0.0.1:0" for
// any free port) with default flags, and stops it when the test ends; it
// does not close the backend. It returns the bound address.
func Serve(t testing.TB, addr string, backend backend.Backend, logger *slog.Logger) string {
	t.Helper()
	var cfg pusher.Config
	cfg.RegisterFlags(flag.NewFlagSet("pusher", flag.PanicOnError))
	cfg.GRPCListenAddress = addr
	cfg.ShutdownTimeout = 5 * time.Second
	srv := pusher.NewServer(cfg, backend, logger, prometheus.NewRegistry())
	svc, err := pusher.Listen(cfg, srv, logger)
	if err != nil {
		t.Fatalf("pushertest: start pusher on %s: %v", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("pushertest: pusher run: %v", err)
			}
		case <-time.After(stopTimeout):
			t.Errorf("pushertest: pusher did not stop within %s", stopTimeout)
		}
	})
	return svc.Addr()
}
