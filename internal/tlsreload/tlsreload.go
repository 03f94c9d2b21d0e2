// Package tlsreload builds tls.Configs whose certificate, key and CA pool
// are read from PEM files again whenever the files change, so certificates
// rotate without a restart. Kafka clients, the gRPC client and server and
// the HTTP servers all use it.
//
// The files are read on every handshake and compared with what was loaded
// last: handshakes are rare (one per connection) and the files small, and
// reading them avoids the pitfalls of modification times (coarse clocks,
// a copy that keeps the old time). A read that fails, or files that do not
// parse, keep the last good material in use and are reported by Err: a
// half-written rotation must not cut every new connection.
package tlsreload

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
)

// MinVersion is the oldest TLS version any Ferry endpoint accepts.
const MinVersion = tls.VersionTLS12

// Files names the PEM files of one TLS endpoint. Any may be empty: a client
// without Cert and Key presents no certificate, and one without CA trusts
// the system roots.
type Files struct {
	// CA holds the certificates trusted to sign the peer's certificate.
	CA string
	// Cert holds this endpoint's certificate chain, leaf first.
	Cert string
	// Key holds the private key of Cert.
	Key string
}

// Validate reports a pair that is half set: a certificate needs its key.
func (f Files) Validate() error {
	if (f.Cert == "") != (f.Key == "") {
		return errors.New("a certificate path and a key path must be set together")
	}
	return nil
}

// material is one consistent load of the files.
type material struct {
	raw  [3][]byte // CA, Cert, Key as read
	cert *tls.Certificate
	pool *x509.CertPool
}

// Reloader holds the current material of one set of Files.
type Reloader struct {
	files Files

	mu      sync.Mutex
	cur     *material
	lastErr error
	// version counts the changes of cur.
	version uint64
}

// New loads the files once, failing if they are unreadable or invalid, so
// a wrong path is reported at start-up rather than at the first handshake.
func New(files Files) (*Reloader, error) {
	if err := files.Validate(); err != nil {
		return nil, err
	}
	r := &Reloader{files: files}
	m, err := r.load()
	if err != nil {
		return nil, err
	}
	r.cur = m
	return r, nil
}

// Err returns the error of the last reload that failed, or nil once a
// later reload succeeded.
func (r *Reloader) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

// current returns the material of the files as they are now, reloading
// them if their bytes changed.
func (r *Reloader) current() *material {
	r.mu.Lock()
	defer r.mu.Unlock()
	raw, err := r.read()
	if err == nil && sameBytes(raw, r.cur.raw) {
		r.lastErr = nil
		return r.cur
	}
	var m *material
	if err == nil {
		m, err = parse(r.files, raw)
	}
	if err != nil {
		r.lastErr = err
		return r.cur
	}
	r.cur, r.lastErr = m, nil
	r.version++
	return m
}

// Version reads the files as a handshake would and returns a number that
// changes whenever the material in use does. A holder of a configuration
// that lives longer than one connection (net/http's transport keeps its
// tls.Config and its open connections) compares it before each use and
// starts over when it moved, so that the next request, not only the next
// connection, uses the new certificate.
func (r *Reloader) Version() uint64 {
	r.current()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.version
}

func sameBytes(a, b [3][]byte) bool {
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func (r *Reloader) load() (*material, error) {
	raw, err := r.read()
	if err != nil {
		return nil, err
	}
	return parse(r.files, raw)
}

func (r *Reloader) read() ([3][]byte, error) {
	var raw [3][]byte
	for i, path := range []string{r.files.CA, r.files.Cert, r.files.Key} {
		if path == "" {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return raw, fmt.Errorf("read %s: %w", path, err)
		}
		raw[i] = b
	}
	return raw, nil
}

func parse(files Files, raw [3][]byte) (*material, error) {
	m := &material{raw: raw}
	if files.CA != "" {
		m.pool = x509.NewCertPool()
		if !m.pool.AppendCertsFromPEM(raw[0]) {
			return nil, fmt.Errorf("%s holds no PEM certificate", files.CA)
		}
	}
	if files.Cert != "" {
		c, err := tls.X509KeyPair(raw[1], raw[2])
		if err != nil {
			// The error of X509KeyPair never quotes the key's bytes.
			return nil, fmt.Errorf("load key pair %s, %s: %w", files.Cert, files.Key, err)
		}
		m.cert = &c
	}
	return m, nil
}

// ClientConfig returns a client configuration for one connection: it
// presents the current certificate (if Cert is set) and verifies the server
// with Go's standard checks against the current CA pool (if CA is set, else
// the system roots) and serverName. Call it for every connection, as
// Dialer and Credentials do, so each uses the files as they are then.
// skipVerify accepts any server certificate: for tests only.
func (r *Reloader) ClientConfig(serverName string, skipVerify bool) *tls.Config {
	m := r.current()
	cfg := &tls.Config{
		MinVersion:         MinVersion,
		ServerName:         serverName,
		RootCAs:            m.pool,
		InsecureSkipVerify: skipVerify, //nolint:gosec // only when -*.tls-insecure-skip-verify asks for it
	}
	if r.files.Cert != "" {
		// Sent even when the server's CA list does not name its issuer, so
		// the server reports "unknown certificate authority" rather than a
		// puzzling "certificate required".
		cert := m.cert
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return cert, nil
		}
	}
	return cfg
}

// ServerConfig returns a server configuration that presents the current
// certificate. With CA set, clients must present a certificate signed by
// the current CA pool (mutual TLS). nextProtos are the ALPN protocols
// offered ("h2" for gRPC). It fails without a certificate and key.
func (r *Reloader) ServerConfig(nextProtos ...string) (*tls.Config, error) {
	if r.files.Cert == "" {
		return nil, errors.New("a TLS server needs a certificate and key")
	}
	return &tls.Config{
		MinVersion: MinVersion,
		NextProtos: nextProtos,
		// A fresh configuration per handshake: the CA list sent to the
		// client and the verification both follow the files.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := r.current()
			cfg := &tls.Config{
				MinVersion:   MinVersion,
				NextProtos:   nextProtos,
				Certificates: []tls.Certificate{*m.cert},
			}
			if m.pool != nil {
				cfg.ClientAuth = tls.RequireAndVerifyClientCert
				cfg.ClientCAs = m.pool
			}
			return cfg, nil
		},
	}, nil
}
