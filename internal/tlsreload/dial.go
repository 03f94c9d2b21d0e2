package tlsreload

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/credentials"
)

// Dialer returns a dial function for TLS connections, each made with the
// files as they are at that moment. serverName overrides the name checked
// in the server's certificate; empty means the dialled host. It suits
// kgo.Dialer.
func (r *Reloader) Dialer(serverName string, skipVerify bool, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		name := serverName
		if name == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, fmt.Errorf("tls dial %s: %w", addr, err)
			}
			name = host
		}
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: r.ClientConfig(name, skipVerify)}
		return d.DialContext(ctx, network, addr)
	}
}

// Credentials returns gRPC transport credentials that make each
// connection's TLS configuration from the files as they are then.
func (r *Reloader) Credentials(serverName string) credentials.TransportCredentials {
	return &reloadingCredentials{r: r, serverName: serverName, TransportCredentials: credentials.NewTLS(&tls.Config{MinVersion: MinVersion})}
}

// reloadingCredentials is a client's credentials.TransportCredentials; the
// embedded static credentials answer Info and refuse server handshakes.
type reloadingCredentials struct {
	credentials.TransportCredentials
	r          *Reloader
	serverName string
	// nameFlag is the flag that sets serverName, for Probe's advice; ""
	// when the credentials were not made from flags.
	nameFlag string
}

// ClientHandshake does the handshake with a configuration made now. The
// name verified is the authority's host, which gRPC takes from the dial
// target: Client.Authority makes it the configured server name.
func (c *reloadingCredentials) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return credentials.NewTLS(c.r.ClientConfig(c.serverName, false)).ClientHandshake(ctx, authority, conn)
}

// Clone returns a copy.
func (c *reloadingCredentials) Clone() credentials.TransportCredentials {
	cp := *c
	return &cp
}

// Probe reports why the server at addr refuses the TLS connections creds
// make, or nil when it does not (or creds are not this package's). gRPC
// often cannot say: under TLS 1.3 a server judges the client's certificate
// after the client's handshake has finished, so its alert races the client's
// first write and the client sees only "broken pipe". The probe writes
// nothing after the handshake and waits up to a second for the verdict, so
// the alert ("unknown certificate authority", "certificate required") is
// what it reads.
func Probe(ctx context.Context, creds credentials.TransportCredentials, addr string) error {
	rc, ok := creds.(*reloadingCredentials)
	if !ok {
		return nil
	}
	name := rc.serverName
	if name == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("tls probe %s: %w", addr, err)
		}
		name = host
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	d := tls.Dialer{Config: rc.r.ClientConfig(name, false)}
	conn, err := d.DialContext(ctx, "tcp", addr)
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return nil // unreachable is not a TLS verdict; the caller has that error
	}
	if err != nil {
		return withNames(err, rc.nameFlag)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	var b [1]byte
	_, err = conn.Read(b[:])
	if errors.As(err, &op) && op.Op == "remote error" {
		return err
	}
	return nil
}

// withNames adds to the error of a certificate that does not carry the
// name verified the names it does carry, and the flag that sets the name
// to verify: a client that dials by IP address has to be told one.
func withNames(err error, flag string) error {
	var he x509.HostnameError
	if !errors.As(err, &he) || he.Certificate == nil {
		return err
	}
	names := slices.Clone(he.Certificate.DNSNames)
	for _, ip := range he.Certificate.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return err
	}
	advice := "verify one of them"
	if flag != "" {
		advice = "set " + flag + " to one of them"
	}
	return fmt.Errorf("%w: the certificate names %s; %s", err, strings.Join(names, ", "), advice)
}
