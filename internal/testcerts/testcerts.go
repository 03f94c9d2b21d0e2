// Package testcerts makes throw-away certificate authorities and
// certificates for tests of TLS endpoints, written as PEM files.
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority that signs leaf certificates.
type CA struct {
	// CertPath is the CA certificate as a PEM file.
	CertPath string
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
	dir      string
}

// Pair names the PEM files of a leaf certificate and its key.
type Pair struct {
	CertPath string
	KeyPath  string
}

var serial big.Int

// NewCA creates a CA named name with its certificate in t.TempDir().
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("testcerts: create CA %s: %v", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testcerts: parse CA %s: %v", name, err)
	}
	dir := t.TempDir()
	ca := &CA{CertPath: filepath.Join(dir, name+"-ca.pem"), cert: cert, key: key, dir: dir}
	write(t, ca.CertPath, "CERTIFICATE", der)
	return ca
}

// Issue signs a certificate for name (also its DNS name; 127.0.0.1 and
// localhost are always included), usable by servers and clients, and
// writes it and its key as name.pem and name-key.pem (PKCS#8).
func (ca *CA) Issue(t testing.TB, name string) Pair {
	t.Helper()
	p := Pair{CertPath: filepath.Join(ca.dir, name+".pem"), KeyPath: filepath.Join(ca.dir, name+"-key.pem")}
	ca.IssueTo(t, name, p)
	return p
}

// IssueDNSOnly is Issue for a certificate that names name alone: no IP
// address and no localhost, so a client that dials it by address must be
// told the name to verify.
func (ca *CA) IssueDNSOnly(t testing.TB, name string) Pair {
	t.Helper()
	p := Pair{CertPath: filepath.Join(ca.dir, name+".pem"), KeyPath: filepath.Join(ca.dir, name+"-key.pem")}
	ca.issue(t, name, p, []string{name}, nil)
	return p
}

// IssueTo is Issue writing to the files of p, replacing them: a rotation.
// It writes each file through a rename, as a deployment tool should.
func (ca *CA) IssueTo(t testing.TB, name string, p Pair) {
	t.Helper()
	ca.issue(t, name, p, []string{name, "localhost"}, []net.IP{net.IPv4(127, 0, 0, 1)})
}

// issue signs a certificate for name with these subject alternative names.
func (ca *CA) issue(t testing.TB, name string, p Pair, dnsNames []string, ips []net.IP) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("testcerts: issue %s: %v", name, err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("testcerts: marshal key of %s: %v", name, err)
	}
	write(t, p.KeyPath, "PRIVATE KEY", pk)
	write(t, p.CertPath, "CERTIFICATE", der)
}

// Serial returns the serial number of the certificate in path, so a test
// can tell which of two certificates a peer presented.
func Serial(t testing.TB, path string) *big.Int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("testcerts: %v", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("testcerts: %s holds no PEM block", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatalf("testcerts: parse %s: %v", path, err)
	}
	return c.SerialNumber
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testcerts: generate key: %v", err)
	}
	return key
}

var serialMu = make(chan struct{}, 1)

func nextSerial() *big.Int {
	serialMu <- struct{}{}
	defer func() { <-serialMu }()
	serial.Add(&serial, big.NewInt(1))
	return new(big.Int).Add(&serial, big.NewInt(time.Now().UnixNano()))
}

func write(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("testcerts: write %s: %v", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatalf("testcerts: %v", err)
	}
}
