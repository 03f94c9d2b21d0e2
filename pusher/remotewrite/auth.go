package remotewrite

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
)

// authorization returns the Authorization header value the configuration
// asks for, or "" for none. The secret files are read once, at start-up: a
// missing or empty file fails New instead of every request. A rotated
// secret needs a restart.
func (c *Config) authorization() (string, error) {
	switch {
	case c.BearerTokenFile != "":
		token, err := readSecret(c.BearerTokenFile)
		if err != nil {
			return "", fmt.Errorf("-remote-write.bearer-token-file: %w", err)
		}
		return "Bearer " + token, nil
	case c.BasicAuthUsername != "":
		password, err := readSecret(c.BasicAuthPasswordFile)
		if err != nil {
			return "", fmt.Errorf("-remote-write.basic-auth-password-file: %w", err)
		}
		creds := c.BasicAuthUsername + ":" + password
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(creds)), nil
	default:
		return "", nil
	}
}

// readSecret reads a secret file without its trailing line breaks, which
// editors and `echo` add and no secret contains.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read secret: %w", err)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	if strings.ContainsAny(s, "\r\n") {
		return "", fmt.Errorf("%s has more than one line", path)
	}
	return s, nil
}

// clientTLS builds the TLS configuration of the connections to the
// receiver, or nil for the defaults (system roots, the URL's host name).
func (t *TLSConfig) clientTLS() (*tls.Config, error) {
	if !t.set() {
		return nil, nil
	}
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // an explicit, documented operator choice
	}
	if t.CAPath != "" {
		pem, err := os.ReadFile(t.CAPath)
		if err != nil {
			return nil, fmt.Errorf("-remote-write.tls-ca-path: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-remote-write.tls-ca-path: no PEM certificate in %s", t.CAPath)
		}
		cfg.RootCAs = pool
	}
	if t.CertPath != "" {
		cert, err := tls.LoadX509KeyPair(t.CertPath, t.KeyPath)
		if err != nil {
			return nil, fmt.Errorf("-remote-write.tls-cert-path/-remote-write.tls-key-path: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
