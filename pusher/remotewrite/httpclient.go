package remotewrite

// The HTTP client to the receiver is prometheus/common's, the one
// Prometheus' own remote write uses: the flags are mapped onto a
// config.HTTPClientConfig, which reads the password and token files for
// every request (a rotated secret is used without a restart) and sets up
// the proxy. TLS comes from internal/tlsreload, Ferry's one TLS loader,
// through the client's NewTLSConfigFunc hook, and the round tripper is
// built again whenever the certificate files change, so that the next
// request, not only the next connection, presents the new certificate.

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/config"

	"github.com/ferrylabs/ferry/internal/tlsreload"
)

// httpClientConfig maps the authentication flags onto prometheus/common's
// configuration. Redirects are answered, not followed (see classify).
func (c *Config) httpClientConfig() config.HTTPClientConfig {
	hc := config.DefaultHTTPClientConfig
	hc.FollowRedirects = false
	hc.EnableHTTP2 = true
	hc.ProxyConfig = config.ProxyConfig{ProxyFromEnvironment: true}
	switch {
	case c.BearerTokenFile != "":
		hc.Authorization = &config.Authorization{Type: "Bearer", CredentialsFile: c.BearerTokenFile}
	case c.BasicAuthUsername != "":
		hc.BasicAuth = &config.BasicAuth{Username: c.BasicAuthUsername, PasswordFile: c.BasicAuthPasswordFile}
	}
	return hc
}

// checkSecrets reads the secret files once, so that a missing or empty one
// fails at start-up rather than every request; the client reads them again
// for each request.
func (c *Config) checkSecrets() error {
	for _, s := range []struct{ flag, path string }{
		{"-remote-write.bearer-token-file", c.BearerTokenFile},
		{"-remote-write.basic-auth-password-file", c.BasicAuthPasswordFile},
	} {
		if s.path == "" {
			continue
		}
		if err := checkSecret(s.path); err != nil {
			return fmt.Errorf("%s: %w", s.flag, err)
		}
	}
	return nil
}

// checkSecret refuses a secret file that is unreadable, empty or of more
// than one line (the client trims surrounding white space, which editors
// and `echo` add and no secret contains). Its errors never quote the file.
func checkSecret(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read secret: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return fmt.Errorf("%s is empty", path)
	}
	if strings.ContainsAny(s, "\r\n") {
		return fmt.Errorf("%s has more than one line", path)
	}
	return nil
}

// newRoundTripper returns the client's round tripper: prometheus/common's
// for cfg, with TLS from a reloader of the -remote-write.tls-* files when
// the URL is https.
func newRoundTripper(cfg Config) (http.RoundTripper, error) {
	hc := cfg.httpClientConfig()
	if err := hc.Validate(); err != nil {
		return nil, fmt.Errorf("remote write: %w", err)
	}
	if err := cfg.checkSecrets(); err != nil {
		return nil, fmt.Errorf("remote write: %w", err)
	}
	dialer := &net.Dialer{Timeout: min(cfg.Timeout, 30*time.Second), KeepAlive: 30 * time.Second}
	build := func(tlsCfg *tls.Config) (http.RoundTripper, error) {
		return config.NewRoundTripperFromConfig(hc, "remote_write",
			config.WithDialContextFunc(dialer.DialContext),
			config.WithIdleConnTimeout(90*time.Second),
			config.WithNewTLSConfigFunc(func(context.Context, *config.TLSConfig, ...config.TLSConfigOption) (*tls.Config, error) {
				return tlsCfg, nil
			}))
	}
	if !strings.HasPrefix(cfg.URL, "https://") {
		return build(nil)
	}
	r, err := tlsreload.New(tlsreload.Files{CA: cfg.TLS.CAPath, Cert: cfg.TLS.CertPath, Key: cfg.TLS.KeyPath})
	if err != nil {
		return nil, fmt.Errorf("remote write: -remote-write.tls-ca-path, -remote-write.tls-cert-path, -remote-write.tls-key-path: %w", err)
	}
	t := &reloadingTransport{
		tls: r,
		build: func() (http.RoundTripper, error) {
			return build(r.ClientConfig(cfg.TLS.ServerName, cfg.TLS.InsecureSkipVerify))
		},
	}
	if _, err := t.current(); err != nil {
		return nil, err
	}
	return t, nil
}

// reloadingTransport replaces its round tripper, and with it every
// connection, when the TLS files change: an HTTP transport keeps its TLS
// configuration and reuses its connections, so without it a rotated
// certificate would be presented only once the old connections close.
// Requests already sent finish on the old connections, which then close
// with the old transport. prometheus/common's own TLSRoundTripper does
// the same for the files it loads itself, and like it this reads the files
// for every request: 32 µs with a CA, certificate and key
// (BenchmarkVersion in internal/tlsreload), against about 380 µs of client
// CPU for a request of 2,000 series (BenchmarkPushRaw). Without TLS files
// nothing is read.
type reloadingTransport struct {
	tls   *tlsreload.Reloader
	build func() (http.RoundTripper, error)

	mu      sync.Mutex
	rt      http.RoundTripper
	version uint64
}

// RoundTrip implements http.RoundTripper.
func (t *reloadingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rt, err := t.current()
	if err != nil {
		return nil, err
	}
	return rt.RoundTrip(req)
}

// current returns the round tripper for the files as they are now. The
// version is read before the configuration is built: a change in between
// costs one more rebuild, never a stale configuration.
func (t *reloadingTransport) current() (http.RoundTripper, error) {
	v := t.tls.Version()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rt != nil && v == t.version {
		return t.rt, nil
	}
	rt, err := t.build()
	if err != nil {
		return nil, fmt.Errorf("remote write: %w", err)
	}
	if t.rt != nil {
		closeIdle(t.rt)
	}
	t.rt, t.version = rt, v
	return rt, nil
}

// CloseIdleConnections closes the idle connections of the current round
// tripper, as http.Client.CloseIdleConnections expects.
func (t *reloadingTransport) CloseIdleConnections() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rt != nil {
		closeIdle(t.rt)
	}
}

func closeIdle(rt http.RoundTripper) {
	if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
