package tlsreload_test

import (
	"context"
	"crypto/tls"
	"flag"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/testcerts"
	"github.com/ferrylabs/ferry/internal/tlsreload"
)

// dial completes a handshake and reads one byte, which fails when the
// server rejected the client's certificate (TLS 1.3 reports that after the
// client's handshake returns). It returns the server's leaf certificate.
func dial(t *testing.T, addr string, cfg *tls.Config) (*tls.ConnectionState, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d := tls.Dialer{Config: cfg}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		return nil, err
	}
	cs := c.(*tls.Conn).ConnectionState()
	return &cs, nil
}

func mustNew(t *testing.T, f tlsreload.Files) *tlsreload.Reloader {
	t.Helper()
	r, err := tlsreload.New(f)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func serverConfig(t *testing.T, r *tlsreload.Reloader) *tls.Config {
	t.Helper()
	cfg, err := r.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ferry")
	other := testcerts.NewCA(t, "other")
	srv := ca.Issue(t, "server")
	cli := ca.Issue(t, "client")
	stranger := other.Issue(t, "stranger")
	addr := testcerts.Serve(t, serverConfig(t, mustNew(t, tlsreload.Files{CA: ca.CertPath, Cert: srv.CertPath, Key: srv.KeyPath})))

	for _, tc := range []struct {
		name    string
		files   tlsreload.Files
		wantErr string
	}{
		{"a client with a certificate of the trusted CA is accepted", tlsreload.Files{CA: ca.CertPath, Cert: cli.CertPath, Key: cli.KeyPath}, ""},
		{"a client without a certificate is refused", tlsreload.Files{CA: ca.CertPath}, "certificate required"},
		{"a client with a certificate of another CA is refused", tlsreload.Files{CA: ca.CertPath, Cert: stranger.CertPath, Key: stranger.KeyPath}, "unknown certificate authority"},
		{"a client that does not trust the server's CA refuses it", tlsreload.Files{CA: other.CertPath, Cert: cli.CertPath, Key: cli.KeyPath}, "certificate signed by unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := mustNew(t, tc.files)
			_, err := dial(t, addr, r.ClientConfig("server", false))
			wantError(t, "dial", err, tc.wantErr)
			// Probe must name the same verdict without a write of its own.
			wantError(t, "Probe", tlsreload.Probe(context.Background(), r.Credentials("server"), addr), tc.wantErr)
		})
	}
}

// wantError fails the test unless err contains want ("" wants no error).
func wantError(t *testing.T, what string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: %v", what, err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("%s: got error %v, want one containing %q", what, err, want)
	}
}

func TestServerCertificateRotation(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ferry")
	srv := ca.Issue(t, "server")
	addr := testcerts.Serve(t, serverConfig(t, mustNew(t, tlsreload.Files{Cert: srv.CertPath, Key: srv.KeyPath})))
	client := mustNew(t, tlsreload.Files{CA: ca.CertPath}).ClientConfig("server", false)

	before := testcerts.Serial(t, srv.CertPath)
	cs, err := dial(t, addr, client)
	if err != nil {
		t.Fatal(err)
	}
	if got := cs.PeerCertificates[0].SerialNumber; got.Cmp(before) != 0 {
		t.Fatalf("server presented serial %v, want %v", got, before)
	}
	ca.IssueTo(t, "server", srv)
	after := testcerts.Serial(t, srv.CertPath)
	cs, err = dial(t, addr, client)
	if err != nil {
		t.Fatal(err)
	}
	if got := cs.PeerCertificates[0].SerialNumber; got.Cmp(after) != 0 {
		t.Fatalf("after rotation the server presented serial %v, want the new %v", got, after)
	}
}

func TestClientCAReload(t *testing.T) {
	t.Parallel()
	oldCA := testcerts.NewCA(t, "old")
	newCA := testcerts.NewCA(t, "new")
	srv := newCA.Issue(t, "server")
	addr := testcerts.Serve(t, serverConfig(t, mustNew(t, tlsreload.Files{Cert: srv.CertPath, Key: srv.KeyPath})))

	trust := t.TempDir() + "/ca.pem"
	copyFile(t, oldCA.CertPath, trust)
	r := mustNew(t, tlsreload.Files{CA: trust})
	if _, err := dial(t, addr, r.ClientConfig("server", false)); err == nil {
		t.Fatal("a client trusting only the old CA accepted a server of the new one")
	}
	copyFile(t, newCA.CertPath, trust)
	if _, err := dial(t, addr, r.ClientConfig("server", false)); err != nil {
		t.Fatalf("after the CA file changed: %v", err)
	}
}

func TestBrokenRotationKeepsTheLastGoodCertificate(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ferry")
	srv := ca.Issue(t, "server")
	r := mustNew(t, tlsreload.Files{Cert: srv.CertPath, Key: srv.KeyPath})
	addr := testcerts.Serve(t, serverConfig(t, r))
	client := mustNew(t, tlsreload.Files{CA: ca.CertPath}).ClientConfig("server", false)

	if err := os.WriteFile(srv.CertPath, []byte("half written"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, addr, client); err != nil {
		t.Fatalf("a broken certificate file cut new connections: %v", err)
	}
	if r.Err() == nil {
		t.Fatal("Err is nil after a failed reload")
	}
}

func TestNewRejectsBadFiles(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ferry")
	pair := ca.Issue(t, "server")
	for _, tc := range []struct {
		name  string
		files tlsreload.Files
	}{
		{"a certificate without its key", tlsreload.Files{Cert: pair.CertPath}},
		{"a missing CA file", tlsreload.Files{CA: pair.CertPath + ".missing"}},
		{"a CA file without certificates", tlsreload.Files{CA: pair.KeyPath}},
		{"a key that does not match", tlsreload.Files{Cert: pair.CertPath, Key: ca.Issue(t, "other").KeyPath}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := tlsreload.New(tc.files); err == nil {
				t.Fatal("New accepted it")
			}
		})
	}
}

func TestServerConfigNeedsACertificate(t *testing.T) {
	t.Parallel()
	if _, err := mustNew(t, tlsreload.Files{}).ServerConfig(); err == nil {
		t.Fatal("ServerConfig without a certificate succeeded")
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestClientChecksTheServerName(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ferry")
	srv := ca.Issue(t, "server")
	addr := testcerts.Serve(t, serverConfig(t, mustNew(t, tlsreload.Files{Cert: srv.CertPath, Key: srv.KeyPath})))
	client := mustNew(t, tlsreload.Files{CA: ca.CertPath})
	if _, err := dial(t, addr, client.ClientConfig("server", false)); err != nil {
		t.Fatalf("the certificate's own name: %v", err)
	}
	if _, err := dial(t, addr, client.ClientConfig("elsewhere", false)); err == nil || !strings.Contains(err.Error(), "elsewhere") {
		t.Fatalf("another name: got %v, want a certificate error naming it", err)
	}
}

// TestProbeNamesTheCertificatesNamesAndTheFlag: a client that dials by
// IP address a server whose certificate names a DNS name only is told the
// name and the flag that sets it.
func TestProbeNamesTheCertificatesNamesAndTheFlag(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ferry")
	srv := ca.IssueDNSOnly(t, "pusher.ferry.test")
	addr := testcerts.Serve(t, serverConfig(t, mustNew(t, tlsreload.Files{Cert: srv.CertPath, Key: srv.KeyPath})))
	c := tlsreload.Client{}
	c.RegisterFlagsWithPrefix("pusher", "pusher", flag.NewFlagSet("test", flag.PanicOnError))
	c.Enabled, c.CAPath = true, ca.CertPath
	creds, err := c.Credentials()
	if err != nil {
		t.Fatal(err)
	}
	err = tlsreload.Probe(context.Background(), creds, addr)
	want := "the certificate names pusher.ferry.test; set -pusher.tls-server-name to one of them"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Probe = %v, want an error containing %q", err, want)
	}
}

func TestDialerReadsTheFilesForEveryConnection(t *testing.T) {
	t.Parallel()
	oldCA := testcerts.NewCA(t, "old")
	newCA := testcerts.NewCA(t, "new")
	srv := newCA.Issue(t, "server")
	addr := testcerts.Serve(t, serverConfig(t, mustNew(t, tlsreload.Files{Cert: srv.CertPath, Key: srv.KeyPath})))
	trust := t.TempDir() + "/ca.pem"
	copyFile(t, oldCA.CertPath, trust)
	dial := mustNew(t, tlsreload.Files{CA: trust}).Dialer("", false, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c, err := dial(ctx, "tcp", addr); err == nil {
		_ = c.(*tls.Conn).Handshake()
		c.Close()
		t.Fatal("a dialer trusting only the old CA accepted a server of the new one")
	}
	copyFile(t, newCA.CertPath, trust)
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("after the CA file changed: %v", err)
	}
	c.Close()
}

// TestProbeLeavesAnUnreachableServerToTheCaller: a refused connection is
// no TLS verdict, and the caller already has that error.
func TestProbeLeavesAnUnreachableServerToTheCaller(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ferry")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	if err := tlsreload.Probe(context.Background(), mustNew(t, tlsreload.Files{CA: ca.CertPath}).Credentials("server"), addr); err != nil {
		t.Errorf("Probe of a closed port: %v, want nil", err)
	}
}

// TestVersionMovesOnlyWhenTheMaterialChanges: Version is what a
// long-lived client compares to know that it must start over, so it must
// move on a rotation, and only then: not on a read of the same files, and
// not on a broken rotation, which keeps the last good material.
func TestVersionMovesOnlyWhenTheMaterialChanges(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ferry")
	cli := ca.Issue(t, "client")
	r := mustNew(t, tlsreload.Files{CA: ca.CertPath, Cert: cli.CertPath, Key: cli.KeyPath})
	v0 := r.Version()
	if v := r.Version(); v != v0 {
		t.Fatalf("Version moved from %d to %d without a change", v0, v)
	}
	ca.IssueTo(t, "client", cli)
	v1 := r.Version()
	if v1 == v0 {
		t.Fatal("Version did not move when the certificate was replaced")
	}
	if err := os.WriteFile(cli.CertPath, []byte("half written"), 0o600); err != nil {
		t.Fatal(err)
	}
	if v := r.Version(); v != v1 {
		t.Fatalf("Version moved on a broken rotation (%d to %d)", v1, v)
	}
}

// BenchmarkVersion is what a long-lived client pays per request to follow
// the files: reading the CA, certificate and key and comparing them.
func BenchmarkVersion(b *testing.B) {
	ca := testcerts.NewCA(b, "ferry")
	cli := ca.Issue(b, "client")
	r, err := tlsreload.New(tlsreload.Files{CA: ca.CertPath, Cert: cli.CertPath, Key: cli.KeyPath})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		r.Version()
	}
}
