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
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/testcerts"
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

// serialReceiver records the serial number of the client certificate of
// every request.
type serialReceiver struct {
	mu      sync.Mutex
	serials []*big.Int
}

func (s *serialReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	s.mu.Lock()
	s.serials = append(s.serials, r.TLS.PeerCertificates[0].SerialNumber)
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *serialReceiver) last(t *testing.T) *big.Int {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.serials) == 0 {
		t.Fatal("the receiver got no request")
	}
	return s.serials[len(s.serials)-1]
}

// TestTheNextRequestPresentsARotatedClientCertificate replaces the client
// certificate's files on disk between two requests on a kept-alive
// connection, and checks by its serial number that the receiver sees the
// new certificate on the very next request.
func TestTheNextRequestPresentsARotatedClientCertificate(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ferry")
	server := ca.Issue(t, "receiver")
	client := ca.Issue(t, "pusher")
	pair, err := tls.LoadX509KeyPair(server.CertPath, server.KeyPath)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(ca.CertPath)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	rr := &serialReceiver{}
	srv := httptest.NewUnstartedServer(rr)
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs: pool, MinVersion: tls.VersionTLS12,
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	cfg := testConfig(srv.URL)
	cfg.TLS.CAPath, cfg.TLS.CertPath, cfg.TLS.KeyPath = ca.CertPath, client.CertPath, client.KeyPath
	c, _ := newTestClient(t, cfg)
	pushOne(t, c, "tenant-a", testRequest())
	if got, want := rr.last(t), testcerts.Serial(t, client.CertPath); got.Cmp(want) != 0 {
		t.Fatalf("first request presented serial %v, want %v", got, want)
	}
	pushOne(t, c, "tenant-a", testRequest()) // the connection is kept alive
	ca.IssueTo(t, "pusher", client)
	pushOne(t, c, "tenant-a", testRequest())
	if got, want := rr.last(t), testcerts.Serial(t, client.CertPath); got.Cmp(want) != 0 {
		t.Fatalf("after the rotation the request presented serial %v, want the new %v", got, want)
	}
}

// TestARotatedBearerTokenIsSentWithoutARestart: the token file is read for
// every request (prometheus/common's client does it).
func TestARotatedBearerTokenIsSentWithoutARestart(t *testing.T) {
	t.Parallel()
	rr := &recordingReceiver{}
	srv := httptest.NewServer(rr)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	cfg := testConfig(srv.URL)
	cfg.BearerTokenFile = writeFile(t, dir, "token", "first\n")
	c, _ := newTestClient(t, cfg)
	pushOne(t, c, "t", testRequest())
	writeFile(t, dir, "token", "second\n")
	pushOne(t, c, "t", testRequest())
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if len(rr.got) != 2 || rr.got[0].header.Get("Authorization") != "Bearer first" || rr.got[1].header.Get("Authorization") != "Bearer second" {
		t.Fatalf("Authorization headers: %v", rr.got)
	}
}

// TestNoCredentialInAnAnswerOrAMetric pushes with a basic-auth password
// and with a bearer token to receivers that refuse, fail, redirect or are
// gone, and looks for either secret in the answers' reasons, which reach
// the consumer's logs, and in the metrics.
func TestNoCredentialInAnAnswerOrAMetric(t *testing.T) {
	t.Parallel()
	const secret = "S3CRET-PASSWORD"
	handlers := map[string]http.HandlerFunc{
		"401": func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "who are you", http.StatusUnauthorized) },
		"500": func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", http.StatusInternalServerError) },
		"redirect": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Location", "https://ferry:"+secret+"@elsewhere/push")
			w.WriteHeader(http.StatusFound)
		},
		"gone": nil, // a receiver that is not listening
	}
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	dir := t.TempDir()
	for name, h := range handlers {
		for _, auth := range []func(*Config){
			func(c *Config) {
				c.BasicAuthUsername, c.BasicAuthPasswordFile = "ferry", writeFile(t, dir, "password", secret+"\n")
			},
			func(c *Config) { c.BearerTokenFile = writeFile(t, dir, "token", secret+"\n") },
		} {
			url := gone.URL
			if h != nil {
				srv := httptest.NewServer(h)
				t.Cleanup(srv.Close)
				url = srv.URL
			}
			cfg := testConfig(url)
			auth(&cfg)
			c, reg := newTestClient(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := c.Push(ctx, "t", testRequest())
			cancel()
			if err == nil {
				t.Fatalf("%s: Push succeeded", name)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s: the answer's reason quotes the secret: %v", name, err)
			}
			mfs, gerr := reg.Gather()
			if gerr != nil {
				t.Fatal(gerr)
			}
			for _, mf := range mfs {
				if strings.Contains(mf.String(), secret) {
					t.Errorf("%s: metric %s holds the secret", name, mf.GetName())
				}
			}
		}
	}
}

// TestARotatedCAFileIsTrustedFromTheNextRequest: the receiver's
// certificate is of a CA the client does not trust yet; once the CA file
// is replaced by that CA, the next request goes through.
func TestARotatedCAFileIsTrustedFromTheNextRequest(t *testing.T) {
	t.Parallel()
	oldCA := testcerts.NewCA(t, "old")
	newCA := testcerts.NewCA(t, "new")
	server := newCA.Issue(t, "receiver")
	pair, err := tls.LoadX509KeyPair(server.CertPath, server.KeyPath)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(&recordingReceiver{})
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	trust := filepath.Join(t.TempDir(), "ca.pem")
	copyPEM := func(from string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Dir(trust), filepath.Base(trust), string(b))
	}
	copyPEM(oldCA.CertPath)
	cfg := testConfig(srv.URL)
	cfg.TLS.CAPath = trust
	c, _ := newTestClient(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Push(ctx, "t", testRequest()); outcomeOf(err) != serverError {
		t.Fatalf("Push to a receiver of an untrusted CA = %v, want a server error", err)
	}
	copyPEM(newCA.CertPath)
	pushOne(t, c, "t", testRequest())
}
