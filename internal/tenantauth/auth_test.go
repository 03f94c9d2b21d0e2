package tenantauth_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/ferrylabs/ferry/internal/tenantauth"
)

// writeTenants writes a tenants file: token "tok-a" for team-a, token
// "tok-ab" for team-a and team-b, and user "grafana" (password
// "graf-pass") for the given tenants.
func writeTenants(t *testing.T, path string, grafanaTenants string) {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte("graf-pass"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf(`bearer_tokens:
  - token: tok-a
    tenants: [team-a]
  - token: tok-ab
    tenants: [team-a, team-b]
basic_auth_users:
  - username: grafana
    password_bcrypt: %q
    tenants: [%s]
`, hash, grafanaTenants)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// server serves the tenant the wrapped handler sees.
func server(t *testing.T, path string) *httptest.Server {
	t.Helper()
	a, err := tenantauth.New(tenantauth.Config{TenantsFile: path}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Header.Get(tenantauth.TenantHeader))
	})))
	t.Cleanup(srv.Close)
	return srv
}

type request struct {
	tenant, bearer, user, pass string
}

func get(t *testing.T, url string, r request) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.tenant != "" {
		req.Header.Set(tenantauth.TenantHeader, r.tenant)
	}
	if r.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+r.bearer)
	}
	if r.user != "" {
		req.SetBasicAuth(r.user, r.pass)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestWrap(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	writeTenants(t, path, "team-b")
	srv := server(t, path)
	for _, tc := range []struct {
		name     string
		req      request
		wantCode int
		wantBody string
	}{
		{"a request without a credential is refused with 401", request{tenant: "team-a"}, 401, "no credential"},
		{"an unknown bearer token is refused with 401", request{tenant: "team-a", bearer: "nope"}, 401, "unknown bearer token"},
		{"a wrong password is refused with 401", request{tenant: "team-b", user: "grafana", pass: "wrong"}, 401, "wrong password"},
		{"an unknown user is refused with 401", request{tenant: "team-b", user: "mallory", pass: "graf-pass"}, 401, "wrong password"},
		{"a token naming a tenant it may not use is refused with 403", request{tenant: "team-b", bearer: "tok-a"}, 403, `may not use tenant \"team-b\"`},
		{"a user naming a tenant it may not use is refused with 403", request{tenant: "team-a", user: "grafana", pass: "graf-pass"}, 403, "may not use"},
		{"a token naming its tenant is served", request{tenant: "team-a", bearer: "tok-a"}, 200, "team-a"},
		{"a token with one tenant may omit the header", request{bearer: "tok-a"}, 200, "team-a"},
		{"a token with several tenants must name one", request{bearer: "tok-ab"}, 400, "name one"},
		{"a token with several tenants is served for each", request{tenant: "team-b", bearer: "tok-ab"}, 200, "team-b"},
		{"a user with the right password is served", request{tenant: "team-b", user: "grafana", pass: "graf-pass"}, 200, "team-b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, body := get(t, srv.URL, tc.req)
			if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
				t.Fatalf("got %d %q, want %d with %q", code, body, tc.wantCode, tc.wantBody)
			}
		})
	}
}

func TestReload(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	writeTenants(t, path, "team-b")
	srv := server(t, path)
	grafana := request{tenant: "team-c", user: "grafana", pass: "graf-pass"}
	if code, body := get(t, srv.URL, grafana); code != 403 {
		t.Fatalf("before the change: got %d %q, want 403", code, body)
	}
	writeTenants(t, path, "team-b, team-c")
	if code, body := get(t, srv.URL, grafana); code != 200 || body != "team-c" {
		t.Fatalf("after the file granted team-c: got %d %q, want 200", code, body)
	}
	if err := os.WriteFile(path, []byte("bearer_tokens: [ {token: "), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, srv.URL, grafana); code != 200 {
		t.Fatalf("a broken file must keep the last good credentials: got %d %q", code, body)
	}
}

func TestNewRejectsBadFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"an unknown field", "tokens: []\n", "line 1: an unknown field"},
		{"a token without tenants", "bearer_tokens: [{token: x}]\n", "no tenants"},
		{"an empty token", "bearer_tokens: [{token: '', tenants: [a]}]\n", "empty token"},
		{"a password that is not a bcrypt hash", "basic_auth_users: [{username: u, password_bcrypt: plain, tenants: [a]}]\n", "not a bcrypt hash"},
		{"a user listed twice", "basic_auth_users: [{username: u, password_bcrypt: '$2a$04$zEnyRQSKLMlrsaJEyAQbzu7O/ywMCcNcGJmz2eGn0ElN6yE4D8D7y', tenants: [a]}, {username: u, password_bcrypt: '$2a$04$zEnyRQSKLMlrsaJEyAQbzu7O/ywMCcNcGJmz2eGn0ElN6yE4D8D7y', tenants: [a]}]\n", "listed twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "tenants.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := tenantauth.New(tenantauth.Config{TenantsFile: path}, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := tenantauth.New(tenantauth.Config{TenantsFile: "/nonexistent/tenants.yaml"}, slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("a missing file was accepted")
	}
}

// TestABrokenTenantsFileNeverQuotesAToken writes files that the YAML
// decoder would quote (a token where a list belongs, a token written as a
// key, a token before a syntax error) and checks that neither New's error
// nor the log line of a failed reload holds any part of the token.
func TestABrokenTenantsFileNeverQuotesAToken(t *testing.T) {
	t.Parallel()
	const token = "ZQXJWKVPLMNB0123456789"
	for _, broken := range []string{
		"bearer_tokens: [{token: a, tenants: " + token + "}]\n",
		"bearer_tokens: [{" + token + ": x, tenants: [a]}]\n",
		"bearer_tokens:\n  - token: " + token + "\n    tenants: [a]\n  - " + token + "\n",
		"bearer_tokens: [{token: " + token + ", tenants: [a]}\n",
		"bearer_tokens: [{token: " + token + ", tenants: [a], token: " + token + "}]\n",
		"basic_auth_users: [{username: u, password_bcrypt: " + token + ", tenants: [a]}]\n",
		token + "\n",
		"\t" + token + ": x\n",
	} {
		dir := t.TempDir()
		path := filepath.Join(dir, "tenants.yaml")
		if err := os.WriteFile(path, []byte(broken), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := tenantauth.New(tenantauth.Config{TenantsFile: path}, slog.New(slog.DiscardHandler))
		if err == nil {
			t.Fatalf("New accepted %q", broken)
		}
		if strings.Contains(err.Error(), token[:4]) {
			t.Errorf("New's error for %q quotes the token: %v", broken, err)
		}

		var logs strings.Builder
		writeTenants(t, path, "team-a")
		a, err := tenantauth.New(tenantauth.Config{TenantsFile: path}, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(a.Wrap(http.NotFoundHandler()))
		if err := os.WriteFile(path, []byte(broken), 0o600); err != nil {
			t.Fatal(err)
		}
		get(t, srv.URL, request{bearer: "tok-a"})
		srv.Close()
		if !strings.Contains(logs.String(), "not reloaded") {
			t.Fatalf("no reload failure logged for %q: %s", broken, logs.String())
		}
		if strings.Contains(logs.String(), token[:4]) {
			t.Errorf("the reload failure's log for %q quotes the token: %s", broken, logs.String())
		}
	}
}
