package remotewrite

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		config func(*Config)
		want   string // "" is valid; else the error must contain it
	}{
		{"the defaults with a URL are valid", func(*Config) {}, ""},
		{"a missing URL names -remote-write.url", func(c *Config) { c.URL = "" }, "-remote-write.url is required"},
		{"a URL that is not http names -remote-write.url", func(c *Config) { c.URL = "ftp://x/y" }, "-remote-write.url"},
		{"a URL without a host names -remote-write.url", func(c *Config) { c.URL = "http:///api/v1/push" }, "has no host"},
		{"a URL with credentials names the basic auth flags", func(c *Config) { c.URL = "http://u:p@mimir/api/v1/push" }, "-remote-write.basic-auth-username"},
		{"a zero timeout names -remote-write.timeout", func(c *Config) { c.Timeout = 0 }, "-remote-write.timeout"},
		{"an empty tenant header names -remote-write.tenant-header", func(c *Config) { c.TenantHeader = "" }, "-remote-write.tenant-header"},
		{"a tenant header with a space names -remote-write.tenant-header", func(c *Config) { c.TenantHeader = "X Tenant" }, "-remote-write.tenant-header"},
		{"a reserved tenant header names -remote-write.tenant-header", func(c *Config) { c.TenantHeader = "content-type" }, "-remote-write.tenant-header"},
		{"an empty tenant header is fine when no tenant is sent", func(c *Config) { c.TenantHeader, c.SendTenant = "", false }, ""},
		{"an extra Authorization header names -remote-write.headers", func(c *Config) { mustSet(t, &c.Headers, "authorization=x") }, "-remote-write.headers"},
		{"an extra tenant header names -remote-write.headers", func(c *Config) { mustSet(t, &c.Headers, "X-Scope-OrgID=x") }, "-remote-write.headers"},
		{"a username without password file names both flags", func(c *Config) { c.BasicAuthUsername = "u" }, "-remote-write.basic-auth-password-file"},
		{"a password file without username names both flags", func(c *Config) { c.BasicAuthPasswordFile = "/p" }, "-remote-write.basic-auth-username"},
		{"a username with a colon names -remote-write.basic-auth-username", func(c *Config) { c.BasicAuthUsername, c.BasicAuthPasswordFile = "a:b", "/p" }, "must not contain ':'"},
		{"basic auth and a bearer token are exclusive", func(c *Config) {
			c.BasicAuthUsername, c.BasicAuthPasswordFile, c.BearerTokenFile = "u", "/p", "/t"
		}, "-remote-write.bearer-token-file"},
		{"a certificate without key names both flags", func(c *Config) { c.URL = "https://m/p"; c.TLS.CertPath = "/c" }, "-remote-write.tls-key-path"},
		{"TLS options with an http URL name -remote-write.url", func(c *Config) { c.TLS.ServerName = "m" }, "need an https -remote-write.url"},
		{"TLS options with an https URL are valid", func(c *Config) { c.URL = "https://m/p"; c.TLS.InsecureSkipVerify = true }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig("http://mimir:8080/api/v1/push")
			tc.config(&cfg)
			err := cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			case err != nil && !errors.Is(err, ErrInvalidConfig):
				t.Errorf("Validate() = %v, does not wrap ErrInvalidConfig", err)
			}
		})
	}
}

func TestFlags(t *testing.T) {
	t.Parallel()
	var cfg Config
	f := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg.RegisterFlags(f)
	err := f.Parse([]string{
		"-remote-write.url=https://thanos:19291/api/v1/receive",
		"-remote-write.timeout=5s",
		"-remote-write.tenant-header=THANOS-TENANT",
		"-remote-write.headers=X-A=1,X-B=2",
		"-remote-write.headers=X-A=3",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Timeout != 5*time.Second || cfg.TenantHeader != "THANOS-TENANT" || !cfg.SendTenant {
		t.Errorf("parsed %+v", cfg)
	}
	h := cfg.Headers.Header()
	if got := h.Values("X-A"); len(got) != 2 || got[0] != "1" || got[1] != "3" {
		t.Errorf("X-A = %v, want [1 3]", got)
	}
	if got := cfg.Headers.String(); got != "X-A=1,X-A=3,X-B=2" {
		t.Errorf("String() = %q", got)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
}

// TestHeadersRejectsBadPairsWithoutQuotingThem: a malformed
// -remote-write.headers fails Validate, and neither the flag package's
// parse nor Validate quotes the value, which is often an API key.
func TestHeadersRejectsBadPairsWithoutQuotingThem(t *testing.T) {
	t.Parallel()
	const secret = "S3CRET"
	for _, v := range []string{secret, "=" + secret, "bad name=" + secret, "X-A=1\r\nX-B: " + secret, "X-Key=" + secret + "\x00"} {
		var cfg Config
		f := flag.NewFlagSet("test", flag.ContinueOnError)
		var out strings.Builder
		f.SetOutput(&out)
		cfg.RegisterFlags(f)
		if err := f.Parse([]string{"-remote-write.url=http://mimir/push", "-remote-write.headers=" + v}); err != nil {
			t.Fatalf("Parse(%q) = %v: a bad pair must wait for Validate, which does not quote it", v, err)
		}
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "-remote-write.headers") {
			t.Errorf("Validate with %q = %v, want an error naming -remote-write.headers", v, err)
		} else if strings.Contains(err.Error(), secret) {
			t.Errorf("Validate with %q = %v, quotes the value", v, err)
		}
	}
}

// TestACredentialInTheURLIsNeverQuoted: an operator who puts a password
// (or a token as the user name) in -remote-write.url is told to use the
// basic auth flags, and the error, which is logged, shows neither; nor
// does the reason of a redirect to such a URL, which reaches the
// consumer's logs.
func TestACredentialInTheURLIsNeverQuoted(t *testing.T) {
	t.Parallel()
	const secret = "S3CRET"
	for _, raw := range []string{
		"http://user:" + secret + "@mimir:8080/api/v1/push",
		"https://" + secret + "@mimir/api/v1/push",
		"ftp://user:" + secret + "@mimir/x",
		"http://user:" + secret + "@/api/v1/push",
		"http://user:" + secret + " x@mimir/%zz", // does not parse
	} {
		cfg := testConfig(raw)
		cfg.TLS.ServerName = "mimir"
		err := cfg.Validate()
		if err == nil {
			t.Fatalf("Validate(%q) = nil, want an error", raw)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Validate(%q) = %q, quotes the secret", raw, err)
		}
		if _, err := New(cfg, nil); err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("New(%q) = %v, want an error without the secret", raw, err)
		}
	}
	if got := redactURL("https://tok:" + secret + "@elsewhere/push"); strings.Contains(got, secret) {
		t.Errorf("redactURL kept the secret: %q", got)
	}
}
