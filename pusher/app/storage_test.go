package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

func readyStatus(t *testing.T, p *Process) int {
	t.Helper()
	resp, err := http.Get("http://" + p.HTTPAddr() + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestReadyFailsWhileStorageCannotBeWrittenOrDraining: /ready combines the
// server's draining with the store's check of its storage root.
func TestReadyFailsWhileStorageCannotBeWrittenOrDraining(t *testing.T) {
	var path string
	p := startPusher(t, func(c *Config) { path = c.TSDB.Path })
	if got := readyStatus(t, p); got != http.StatusOK {
		t.Fatalf("/ready %d, want 200", got)
	}
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	if got := readyStatus(t, p); got == http.StatusOK {
		t.Fatal("/ready 200 with the storage root gone")
	}
	if err := os.MkdirAll(path, 0o750); err != nil {
		t.Fatal(err)
	}
	if got := readyStatus(t, p); got != http.StatusOK {
		t.Fatalf("/ready %d once the storage root is back", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Server.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readyStatus(t, p); got == http.StatusOK {
		t.Fatal("/ready 200 while draining")
	}
}

func TestSecondPusherOnOneStoragePathRefusesToStart(t *testing.T) {
	var path string
	startPusher(t, func(c *Config) { path = c.TSDB.Path })
	var cfg Config
	cfg.RegisterFlags(flag.NewFlagSet("", flag.PanicOnError))
	cfg.Pusher.GRPCListenAddress = "127.0.0.1:0"
	cfg.HTTPListenAddress = "127.0.0.1:0"
	cfg.TSDB.Path = path
	p, err := Start(cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		_ = p.Backend.Close()
		t.Fatal("a second pusher started on the same -storage.path")
	}
	if !strings.Contains(err.Error(), path) {
		t.Fatalf("error %q does not name the path", err)
	}
}
