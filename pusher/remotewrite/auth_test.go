package remotewrite

import (
	"context"
	"encoding/pem"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTLSWithHTTP2 talks to a TLS receiver that offers HTTP/2, trusting
// its certificate through -remote-write.tls-ca-path.
func TestTLSWithHTTP2(t *testing.T) {
	t.Parallel()
	rr := &recordingReceiver{}
	srv := httptest.NewUnstartedServer(rr)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	cfg := testConfig(srv.URL)
	cfg.TLS.CAPath = writeFile(t, t.TempDir(), "ca.pem", string(ca))
	cfg.TLS.ServerName = "example.com" // httptest's certificate names it
	c, _ := newTestClient(t, cfg)
	pushOne(t, c, "tenant-a", testRequest())
	if p := rr.only(t).proto; p != 2 {
		t.Errorf("the request used HTTP/%d, want HTTP/2", p)
	}
}

// TestUntrustedCertificateIsServerError: without the CA the handshake
// fails, which is retried, never skipped.
func TestUntrustedCertificateIsServerError(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(&recordingReceiver{})
	t.Cleanup(srv.Close)
	c, _ := newTestClient(t, testConfig(srv.URL))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Push(ctx, "t", testRequest())
	if outcomeOf(err) != serverError || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Push to an untrusted receiver = %v, want a server error about the certificate", err)
	}
}

func TestNewFailsOnMissingFiles(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		name   string
		config func(*Config)
		flag   string
	}{
		{"a missing password file names its flag", func(c *Config) {
			c.BasicAuthUsername, c.BasicAuthPasswordFile = "u", missing
		}, "-remote-write.basic-auth-password-file"},
		{"a missing token file names its flag", func(c *Config) { c.BearerTokenFile = missing }, "-remote-write.bearer-token-file"},
		{"an empty token file names its flag", func(c *Config) {
			c.BearerTokenFile = writeFile(t, t.TempDir(), "empty", "\n")
		}, "-remote-write.bearer-token-file"},
		{"a missing CA file names its flag", func(c *Config) { c.TLS.CAPath = missing }, "-remote-write.tls-ca-path"},
		{"a CA file without certificates names its flag", func(c *Config) {
			c.TLS.CAPath = writeFile(t, t.TempDir(), "ca", "not pem")
		}, "-remote-write.tls-ca-path"},
		{"a missing client certificate names its flag", func(c *Config) {
			c.TLS.CertPath, c.TLS.KeyPath = missing, missing
		}, "-remote-write.tls-cert-path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig("https://receiver:443/api/v1/push")
			tc.config(&cfg)
			_, err := New(cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.flag) {
				t.Errorf("New = %v, want an error naming %s", err, tc.flag)
			}
		})
	}
}
