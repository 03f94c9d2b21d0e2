package app

import (
	"flag"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestValidateSecuritySettings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"should fail when the HTTP write timeout does not exceed the query timeout", func(c *Config) { c.HTTP.WriteTimeout = c.Query.Timeout }, "-http.write-timeout"},
		{"should fail for a gRPC client CA without a server certificate", func(c *Config) { c.Pusher.TLS.ClientCAPath = "ca.pem" }, "-grpc.tls-client-ca-path"},
		{"should fail for an HTTP certificate without its key", func(c *Config) { c.HTTP.TLS.CertPath = "c.pem" }, "-http.tls-key-path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var cfg Config
			cfg.RegisterFlags(flag.NewFlagSet("", flag.PanicOnError))
			tc.edit(&cfg)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

func TestStartFailsForAMissingTenantsFile(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t.TempDir())
	cfg.Pusher.ShutdownTimeout = time.Second
	cfg.Auth.TenantsFile = t.TempDir() + "/missing.yaml"
	p, err := Start(cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatalf("Start succeeded without the tenants file: %+v", p)
	}
	if !strings.Contains(err.Error(), "-auth.tenants-file") {
		t.Fatalf("Start = %v, want an error naming -auth.tenants-file", err)
	}
}
