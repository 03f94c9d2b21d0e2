package tlsreload

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
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
}

// ClientHandshake does the handshake with a configuration made now; gRPC
// sets the server name from the target's authority when serverName is "".
func (c *reloadingCredentials) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return credentials.NewTLS(c.r.ClientConfig(c.serverName, false)).ClientHandshake(ctx, authority, conn)
}

// Clone returns a copy.
func (c *reloadingCredentials) Clone() credentials.TransportCredentials {
	cp := *c
	return &cp
}
