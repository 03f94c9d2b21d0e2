package opsserver

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/testcerts"
	"github.com/ferrylabs/ferry/internal/tlsreload"
)

// defaults returns the flag defaults, as a process would have them.
func defaults() Config {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("test", flag.PanicOnError))
	return c
}

// start runs a server with cfg until the test ends.
func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0", cfg, NewRegistry(), func() error { return nil }, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return s
}

func TestSlowHeadersAreCut(t *testing.T) {
	t.Parallel()
	cfg := defaults()
	cfg.ReadHeaderTimeout = 200 * time.Millisecond
	s := start(t, cfg)
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /ready HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	t0 := time.Now()
	_, err = bufio.NewReader(c).ReadString('\n')
	var nerr net.Error
	if errors.As(err, &nerr) && nerr.Timeout() {
		t.Fatal("the server kept a client that never finished its headers for 5s")
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Fatalf("cut after %s, want about the read-header timeout", d)
	}
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ops")
	srv := ca.Issue(t, "ops")
	cli := ca.Issue(t, "scraper")
	cfg := defaults()
	cfg.TLS = tlsreload.Server{CertPath: srv.CertPath, KeyPath: srv.KeyPath, ClientCAPath: ca.CertPath}
	s := start(t, cfg)

	for _, tc := range []struct {
		name    string
		files   tlsreload.Files
		wantErr string
	}{
		{"a client with a certificate is served", tlsreload.Files{CA: ca.CertPath, Cert: cli.CertPath, Key: cli.KeyPath}, ""},
		{"a client without a certificate is refused", tlsreload.Files{CA: ca.CertPath}, "certificate required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := tlsreload.New(tc.files)
			if err != nil {
				t.Fatal(err)
			}
			client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: r.ClientConfig("ops", false)}}
			resp, err := client.Get("https://" + s.Addr() + "/ready")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("GET = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
		})
	}
}

func TestPlaintextToTLSIsRefused(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ops")
	srv := ca.Issue(t, "ops")
	cfg := defaults()
	cfg.TLS = tlsreload.Server{CertPath: srv.CertPath, KeyPath: srv.KeyPath}
	s := start(t, cfg)
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + s.Addr() + "/ready")
	if err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("a TLS server answered plaintext")
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"should fail for a zero write timeout", func(c *Config) { c.WriteTimeout = 0 }, "-http.write-timeout"},
		{"should fail for a key without its certificate", func(c *Config) { c.TLS.KeyPath = "k.pem" }, "-http.tls-cert-path"},
		{"should fail for a client CA without a certificate", func(c *Config) { c.TLS.ClientCAPath = "ca.pem" }, "-http.tls-client-ca-path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := defaults()
			tc.edit(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}
