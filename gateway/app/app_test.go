package app

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"go.uber.org/goleak"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// startGateway runs a whole gateway process on a loopback port until the
// returned stop is called.
func startGateway(t *testing.T, mutate func(*Config)) (*Process, func()) {
	t.Helper()
	var cfg Config
	cfg.RegisterFlags(flag.NewFlagSet("", flag.PanicOnError))
	cfg.HTTPListenAddress = "127.0.0.1:0"
	cfg.Gateway.DefaultTenant = "t"
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	p, err := Start(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	return p, func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("gateway run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("gateway did not stop within 30s")
		}
	}
}

// closedAddress is a loopback address nothing listens on.
func closedAddress(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

func body(t *testing.T) []byte {
	t.Helper()
	req := prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
		Labels:  []prompb.Label{{Name: "__name__", Value: "up"}},
		Samples: []prompb.Sample{{Value: 1, Timestamp: time.Now().UnixMilli()}},
	}}}
	b, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return snappy.Encode(nil, b)
}

// Not parallel: it checks that no goroutine outlives the gateway.
func TestKafkaDownIsA503WithinTheProduceTimeoutAndLeaksNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const timeout = 500 * time.Millisecond
	p, stop := startGateway(t, func(c *Config) {
		c.Gateway.KafkaAddress = closedAddress(t)
		c.Gateway.ProduceTimeout = timeout
	})
	for range 3 {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.HTTPAddr()+"/api/v1/push", bytes.NewReader(body(t)))
		req.Header.Set("Content-Type", "application/x-protobuf")
		req.Header.Set("Content-Encoding", "snappy")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		cancel()
		took := time.Since(start)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("status %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if took > timeout+2*time.Second {
			t.Errorf("answered after %s, want about the produce timeout of %s", took, timeout)
		}
	}
	resp, err := http.Get("http://" + p.HTTPAddr() + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/ready answered %d with Kafka down, want 503", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()
	stop()
}

func TestASlowClientIsCutAtTheReadTimeout(t *testing.T) {
	t.Parallel()
	p, stop := startGateway(t, func(c *Config) {
		c.Gateway.KafkaAddress = closedAddress(t)
		c.Gateway.ReadTimeout = 300 * time.Millisecond
	})
	defer stop()
	conn, err := net.DialTimeout("tcp", p.HTTPAddr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	// Headers promise 1000 bytes; the body never comes.
	_, err = fmt.Fprintf(conn, "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: 1000\r\n\r\nabc")
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	out, _ := io.ReadAll(conn)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("connection held %s, want it cut near the 300ms read timeout", took)
	}
	if len(out) > 0 && !strings.Contains(string(out), " 400 ") {
		t.Errorf("answer %q, want a 400 or a closed connection", out)
	}
}
