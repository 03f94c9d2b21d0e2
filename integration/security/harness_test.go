// Package security holds the tests of Ferry's security features against
// real parts: a real Apache Kafka broker with a SASL_SSL listener (started
// by the tests, with certificates they make), a pusher serving gRPC over
// mutual TLS on loopback, and consumers started through consumer/app. It
// is a package of its own so that its broker, which costs a JVM, starts
// once and beside the other packages' tests.
package security

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	consumerapp "github.com/ferrylabs/ferry/consumer/app"
	"github.com/ferrylabs/ferry/internal/tlsreload"
	pusherapp "github.com/ferrylabs/ferry/pusher/app"
)

// runTimeout bounds every service a test starts.
const runTimeout = 3 * time.Minute

// logBuffer collects a service's logs, for tests that look for a cause in
// them or for a secret that must not be there.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// startPusher runs a pusher with the discard backend and the given gRPC
// TLS settings on loopback until the test ends; it returns its gRPC address.
func startPusher(t *testing.T, tls tlsreload.Server) string {
	t.Helper()
	var cfg pusherapp.Config
	cfg.RegisterFlags(flag.NewFlagSet("pusher", flag.PanicOnError))
	cfg.Pusher.GRPCListenAddress = "127.0.0.1:0"
	cfg.HTTPListenAddress = "127.0.0.1:0"
	cfg.Pusher.ShutdownTimeout = 5 * time.Second
	cfg.Backend = pusherapp.BackendDiscard
	cfg.Pusher.TLS = tls
	if err := cfg.Validate(); err != nil {
		t.Fatalf("pusher config: %v", err)
	}
	p, err := pusherapp.Start(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("pusher start: %v", err)
	}
	run(t, "pusher", p.Run)
	return p.GRPCAddr()
}

// consumerConfig is a consumer reading partition 0 of topic with short
// intervals; the caller adds the security settings.
func consumerConfig(brokers, topic, pusherAddr string) consumerapp.Config {
	var cfg consumerapp.Config
	cfg.RegisterFlags(flag.NewFlagSet("consumer", flag.PanicOnError))
	cfg.Consumer.KafkaAddress = brokers
	cfg.Consumer.Topic = topic
	cfg.Consumer.ConsumerGroup = "security-test"
	cfg.Consumer.InstanceID = "consumer-0"
	cfg.Consumer.PusherAddress = pusherAddr
	cfg.Consumer.CommitInterval = 100 * time.Millisecond
	cfg.Consumer.BackoffMin = 10 * time.Millisecond
	cfg.Consumer.BackoffMax = 500 * time.Millisecond
	cfg.Consumer.ShutdownTimeout = 5 * time.Second
	cfg.HTTPListenAddress = "127.0.0.1:0"
	return cfg
}

// startConsumer validates cfg, then runs a consumer until the test ends.
func startConsumer(t *testing.T, cfg consumerapp.Config, logs *logBuffer) *consumerapp.Process {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("consumer config: %v", err)
	}
	p, err := consumerapp.Start(cfg, logs.logger())
	if err != nil {
		t.Fatalf("consumer start: %v", err)
	}
	run(t, "consumer", p.Run)
	return p
}

// run runs f in the background and, when the test ends, stops it and
// fails the test if it returned an error.
func run(t *testing.T, what string, f func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v", what, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s did not stop within 30s", what)
		}
	})
}

// waitUntil polls cond every 20ms until it returns nil, failing the test
// with cond's last error after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
