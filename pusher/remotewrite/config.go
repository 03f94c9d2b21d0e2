// Package remotewrite is the pusher backend that forwards every request to
// a Prometheus remote-write receiver (Mimir, Cortex, Thanos Receive,
// VictoriaMetrics, Prometheus with --web.enable-remote-write-receiver) over
// HTTP, and turns the receiver's answer into the pusher's acknowledgement
// the way Prometheus's own remote-write client decides retries. With it the
// pusher keeps no state: the receiver stores and serves the samples.
package remotewrite

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"sort"
	"strings"
	"time"
)

// DefaultTenantHeader is the header that carries the tenant ID to the
// receiver unless -remote-write.tenant-header names another: the one Mimir,
// Cortex and Loki read.
const DefaultTenantHeader = "X-Scope-OrgID"

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("invalid remote-write configuration")

// Config configures the remote-write backend. The zero value is not
// usable: register the flags for their defaults.
type Config struct {
	URL     string
	Timeout time.Duration
	// MaxIdleConns is the value of the deprecated -remote-write.max-idle-conns,
	// which only earns a warning at start-up when set: prometheus/common's
	// client keeps up to 1000 idle connections per host, and offers no
	// setting for it.
	MaxIdleConns int
	TenantHeader string
	SendTenant   bool
	Headers      Headers

	BasicAuthUsername     string
	BasicAuthPasswordFile string
	BearerTokenFile       string

	TLS TLSConfig
}

// TLSConfig holds the client TLS options used when -remote-write.url is
// https.
type TLSConfig struct {
	CAPath             string
	CertPath           string
	KeyPath            string
	ServerName         string
	InsecureSkipVerify bool
}

// RegisterFlags registers the backend's flags on f.
func (c *Config) RegisterFlags(f *flag.FlagSet) {
	f.StringVar(&c.URL, "remote-write.url", "", "With -pusher.backend=remote-write: URL of the receiver's remote-write endpoint, e.g. http://mimir:8080/api/v1/push.")
	f.DurationVar(&c.Timeout, "remote-write.timeout", 30*time.Second, "Longest time one request to the receiver may take, answer included; a request that takes longer is answered SERVER_ERROR and retried.")
	f.IntVar(&c.MaxIdleConns, "remote-write.max-idle-conns", 0, "Deprecated and ignored (a warning at start-up when set): the HTTP client (prometheus/common's, as Prometheus' own remote write) keeps up to 1000 idle connections to the receiver.")
	f.StringVar(&c.TenantHeader, "remote-write.tenant-header", DefaultTenantHeader, "HTTP header that carries the tenant ID to the receiver, e.g. THANOS-TENANT for Thanos Receive.")
	f.BoolVar(&c.SendTenant, "remote-write.send-tenant", true, "Send the tenant ID in -remote-write.tenant-header. Set false for a single-tenant receiver such as Prometheus: every tenant's samples then land in the same place.")
	f.Var(&c.Headers, "remote-write.headers", "Extra HTTP headers sent with every request, as name=value pairs separated by commas; the flag may be repeated.")
	f.StringVar(&c.BasicAuthUsername, "remote-write.basic-auth-username", "", "User name for HTTP basic authentication to the receiver; needs -remote-write.basic-auth-password-file.")
	f.StringVar(&c.BasicAuthPasswordFile, "remote-write.basic-auth-password-file", "", "File holding the password for HTTP basic authentication to the receiver (trailing newlines ignored).")
	f.StringVar(&c.BearerTokenFile, "remote-write.bearer-token-file", "", "File holding a bearer token sent as 'Authorization: Bearer <token>' (trailing newlines ignored). Exclusive with basic authentication.")
	f.StringVar(&c.TLS.CAPath, "remote-write.tls-ca-path", "", "PEM file of the CA certificates that verify the receiver; empty uses the system's.")
	f.StringVar(&c.TLS.CertPath, "remote-write.tls-cert-path", "", "PEM client certificate presented to the receiver; needs -remote-write.tls-key-path.")
	f.StringVar(&c.TLS.KeyPath, "remote-write.tls-key-path", "", "PEM private key of -remote-write.tls-cert-path.")
	f.StringVar(&c.TLS.ServerName, "remote-write.tls-server-name", "", "Name the receiver's certificate must carry, when it differs from the URL's host.")
	f.BoolVar(&c.TLS.InsecureSkipVerify, "remote-write.tls-insecure-skip-verify", false, "Do not verify the receiver's certificate. For tests only: anyone on the path can read and change the samples.")
}

// reservedHeaders are set by the backend itself; an extra header of the
// same name would corrupt the request or its authentication.
var reservedHeaders = []string{
	"Authorization", "Content-Encoding", "Content-Length", "Content-Type",
	"Host", "User-Agent", "X-Prometheus-Remote-Write-Version",
}

// Validate reports the first invalid setting, naming its flag. It reads
// nothing from disk: New does, so that a missing file fails at start-up.
func (c *Config) Validate() error {
	if err := validateURL(c.URL); err != nil {
		return err
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("%w: -remote-write.timeout must be positive, got %s", ErrInvalidConfig, c.Timeout)
	}
	if c.SendTenant {
		if c.TenantHeader == "" || !validHeaderName(c.TenantHeader) {
			return fmt.Errorf("%w: -remote-write.tenant-header %q is not an HTTP header name", ErrInvalidConfig, c.TenantHeader)
		}
		if isReserved(c.TenantHeader) {
			return fmt.Errorf("%w: -remote-write.tenant-header %q is a header the backend sets itself", ErrInvalidConfig, c.TenantHeader)
		}
	}
	if err := c.validateHeaders(); err != nil {
		return err
	}
	if err := c.validateAuth(); err != nil {
		return err
	}
	return c.TLS.validate(c.URL)
}

// validateURL checks -remote-write.url. Its errors never quote the URL as
// given: it may carry a password, and these errors are logged. They show
// it redacted (see redacted), or not at all when it does not parse,
// since url.Parse's own error quotes the input.
func validateURL(raw string) error {
	if raw == "" {
		return fmt.Errorf("%w: -remote-write.url is required with -pusher.backend=remote-write", ErrInvalidConfig)
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL it quotes
		}
		return fmt.Errorf("%w: -remote-write.url is not a URL: %w", ErrInvalidConfig, err)
	}
	shown := redacted(u)
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%w: -remote-write.url %q must be http or https", ErrInvalidConfig, shown)
	}
	if u.Host == "" {
		return fmt.Errorf("%w: -remote-write.url %q has no host", ErrInvalidConfig, shown)
	}
	if u.User != nil {
		return fmt.Errorf("%w: -remote-write.url %q carries credentials: use -remote-write.basic-auth-username and -remote-write.basic-auth-password-file, which stay out of logs", ErrInvalidConfig, shown)
	}
	return nil
}

// redactURL returns raw without its user information, or a placeholder
// when it does not parse: a URL goes into logs and errors only this way.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(an unparsable URL)"
	}
	return redacted(u)
}

// redacted is u.Redacted with the user name hidden too: a token is often
// given as the user name alone (https://TOKEN@host/), which Redacted
// keeps.
func redacted(u *url.URL) string {
	if u.User == nil {
		return u.String()
	}
	c := *u
	c.User = url.UserPassword("xxxxx", "xxxxx")
	return c.Redacted()
}

func (c *Config) validateHeaders() error {
	if c.Headers.err != nil {
		return fmt.Errorf("%w: -remote-write.headers: %w", ErrInvalidConfig, c.Headers.err)
	}
	tenant := textproto.CanonicalMIMEHeaderKey(c.TenantHeader)
	for _, name := range c.Headers.names() {
		if isReserved(name) {
			return fmt.Errorf("%w: -remote-write.headers: %q is a header the backend sets itself", ErrInvalidConfig, name)
		}
		if c.SendTenant && name == tenant {
			return fmt.Errorf("%w: -remote-write.headers: %q is -remote-write.tenant-header, set per request", ErrInvalidConfig, name)
		}
	}
	return nil
}

func (c *Config) validateAuth() error {
	basic := c.BasicAuthUsername != "" || c.BasicAuthPasswordFile != ""
	switch {
	case c.BasicAuthUsername != "" && c.BasicAuthPasswordFile == "":
		return fmt.Errorf("%w: -remote-write.basic-auth-username needs -remote-write.basic-auth-password-file", ErrInvalidConfig)
	case c.BasicAuthUsername == "" && c.BasicAuthPasswordFile != "":
		return fmt.Errorf("%w: -remote-write.basic-auth-password-file needs -remote-write.basic-auth-username", ErrInvalidConfig)
	case basic && c.BearerTokenFile != "":
		return fmt.Errorf("%w: -remote-write.bearer-token-file and -remote-write.basic-auth-username are exclusive: a request carries one Authorization header", ErrInvalidConfig)
	case strings.ContainsRune(c.BasicAuthUsername, ':'):
		return fmt.Errorf("%w: -remote-write.basic-auth-username must not contain ':'", ErrInvalidConfig)
	}
	return nil
}

func (t *TLSConfig) validate(rawURL string) error {
	if (t.CertPath == "") != (t.KeyPath == "") {
		return fmt.Errorf("%w: -remote-write.tls-cert-path and -remote-write.tls-key-path must be set together", ErrInvalidConfig)
	}
	if !t.set() || strings.HasPrefix(rawURL, "https://") {
		return nil
	}
	return fmt.Errorf("%w: -remote-write.tls-* options need an https -remote-write.url, got %q", ErrInvalidConfig, redactURL(rawURL))
}

// set reports whether any TLS option was given.
func (t *TLSConfig) set() bool {
	return t.CAPath != "" || t.CertPath != "" || t.KeyPath != "" || t.ServerName != "" || t.InsecureSkipVerify
}

func isReserved(name string) bool {
	name = textproto.CanonicalMIMEHeaderKey(name)
	for _, r := range reservedHeaders {
		if r == name {
			return true
		}
	}
	return false
}

// validHeaderName reports whether s is an HTTP token (RFC 9110 5.1).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r > 0x7e || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return true
}

// Headers is the value of -remote-write.headers: name=value pairs, comma
// separated, accumulated over repeated flags. A value cannot contain a
// comma: the flag has no escape for it.
//
// A malformed pair is not refused by Set but kept for Validate: the flag
// package quotes the whole argument when Set fails, and a header value is
// often a credential (an API key). Validate names the flag and the header
// name, never a value.
type Headers struct {
	h   http.Header
	err error // the first malformed pair, described without its value
}

// String implements flag.Value.
func (h *Headers) String() string {
	if h == nil || len(h.h) == 0 {
		return ""
	}
	var parts []string
	for _, name := range h.names() {
		for _, v := range h.h[name] {
			parts = append(parts, name+"="+v)
		}
	}
	return strings.Join(parts, ",")
}

// Set implements flag.Value: it adds the pairs of one flag occurrence.
// It never fails; see Headers.
func (h *Headers) Set(s string) error {
	if h.h == nil {
		h.h = http.Header{}
	}
	for i, pair := range strings.Split(s, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		name = strings.TrimSpace(name)
		switch {
		case !ok || !validHeaderName(name):
			h.fail(fmt.Errorf("pair %d is not name=value with an HTTP header name", i+1))
		case strings.ContainsAny(value, "\r\n\x00"):
			h.fail(fmt.Errorf("the value of header %q contains a line break or NUL", name))
		default:
			h.h.Add(name, strings.TrimSpace(value))
		}
	}
	return nil
}

func (h *Headers) fail(err error) {
	if h.err == nil {
		h.err = err
	}
}

// Header returns a copy of the headers.
func (h *Headers) Header() http.Header { return h.h.Clone() }

func (h *Headers) names() []string {
	names := make([]string, 0, len(h.h))
	for name := range h.h {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
