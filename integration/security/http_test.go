package security

import (
	"context"
	"flag"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/testcerts"
	"github.com/ferrylabs/ferry/internal/tlsreload"
	pusherapp "github.com/ferrylabs/ferry/pusher/app"
)

// TestQueryAPIAuthentication runs a pusher with the TSDB backend, HTTPS and
// a tenants file: the query API needs a credential for its tenant, while
// /metrics and /ready stay open to Prometheus.
func TestQueryAPIAuthentication(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ops")
	cert := ca.Issue(t, "pusher")
	tenants := filepath.Join(t.TempDir(), "tenants.yaml")
	if err := os.WriteFile(tenants, []byte("bearer_tokens:\n  - token: team-a-token\n    tenants: [team-a]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var cfg pusherapp.Config
	cfg.RegisterFlags(flag.NewFlagSet("pusher", flag.PanicOnError))
	cfg.Pusher.GRPCListenAddress = "127.0.0.1:0"
	cfg.HTTPListenAddress = "127.0.0.1:0"
	cfg.Pusher.ShutdownTimeout = 5 * time.Second
	cfg.TSDB.Path = t.TempDir()
	cfg.HTTP.TLS = tlsreload.Server{CertPath: cert.CertPath, KeyPath: cert.KeyPath}
	cfg.Auth.TenantsFile = tenants
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	p, err := pusherapp.Start(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	run(t, "pusher", p.Run)
	r, err := tlsreload.New(tlsreload.Files{CA: ca.CertPath})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: r.ClientConfig("pusher", false)}}
	base := "https://" + p.HTTPAddr()

	for _, tc := range []struct {
		name, path, token, tenant string
		want                      int
	}{
		{"/ready needs no credential", "/ready", "", "", 200},
		{"/metrics needs no credential", "/metrics", "", "", 200},
		{"a query without a credential is refused", "/api/v1/query?query=1", "", "team-a", 401},
		{"a query for another tenant is refused", "/api/v1/query?query=1", "team-a-token", "team-b", 403},
		{"a query for the credential's tenant is served", "/api/v1/query?query=1", "team-a-token", "team-a", 200},
		{"a query without the header uses the credential's only tenant", "/api/v1/query?query=1", "team-a-token", "", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			if tc.tenant != "" {
				req.Header.Set("X-Scope-OrgID", tc.tenant)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
}
