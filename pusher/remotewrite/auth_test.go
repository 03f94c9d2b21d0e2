package remotewrite

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
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

// clientCA makes a CA and a client certificate it signs, written as PEM
// files; it returns the CA's pool and the files' paths.
func clientCA(t *testing.T) (pool *x509.CertPool, certPath, keyPath string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "ferry"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath = writeFile(t, dir, "client.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	keyPath = writeFile(t, dir, "client-key.pem", string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})))
	pool = x509.NewCertPool()
	pool.AddCert(ca)
	return pool, certPath, keyPath
}

// TestClientCertificate talks to a receiver that requires a client
// certificate: with -remote-write.tls-cert-path and -tls-key-path the
// request goes through; without them the handshake fails, a server error.
func TestClientCertificate(t *testing.T) {
	t.Parallel()
	pool, certPath, keyPath := clientCA(t)
	rr := &recordingReceiver{}
	srv := httptest.NewUnstartedServer(rr)
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	serverCA := writeFile(t, t.TempDir(), "ca.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})))

	cfg := testConfig(srv.URL)
	cfg.TLS.CAPath, cfg.TLS.ServerName = serverCA, "example.com"
	anonymous, _ := newTestClient(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := anonymous.Push(ctx, "t", testRequest()); outcomeOf(err) != serverError {
		t.Fatalf("Push without a client certificate = %v, want a server error", err)
	}
	cfg.TLS.CertPath, cfg.TLS.KeyPath = certPath, keyPath
	withCert, _ := newTestClient(t, cfg)
	pushOne(t, withCert, "tenant-a", testRequest())
	rr.only(t)
}
