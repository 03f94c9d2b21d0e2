package tlsreload

import (
	"crypto/tls"
	"flag"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Client is the flag-backed TLS configuration of a client, registered
// under a prefix such as "pusher": -pusher.tls-enabled and so on.
type Client struct {
	Enabled    bool
	CAPath     string
	CertPath   string
	KeyPath    string
	ServerName string

	prefix string
}

// RegisterFlagsWithPrefix registers the flags as -<prefix>.tls-*; what
// names the server in their help text.
func (c *Client) RegisterFlagsWithPrefix(prefix, what string, f *flag.FlagSet) {
	c.prefix = prefix
	f.BoolVar(&c.Enabled, prefix+".tls-enabled", false, "Connect to the "+what+" over TLS (1.2 or newer). The -"+prefix+".tls-* paths take effect only with it.")
	f.StringVar(&c.CAPath, prefix+".tls-ca-path", "", "PEM file of the CAs trusted to sign the "+what+"'s certificate; empty trusts the system roots. Re-read when it changes.")
	f.StringVar(&c.CertPath, prefix+".tls-cert-path", "", "PEM file of the client certificate presented to the "+what+" (mutual TLS), with -"+prefix+".tls-key-path. Re-read when it changes.")
	f.StringVar(&c.KeyPath, prefix+".tls-key-path", "", "PEM file of the private key of -"+prefix+".tls-cert-path.")
	f.StringVar(&c.ServerName, prefix+".tls-server-name", "", "Name expected in the "+what+"'s certificate; empty uses the host of its address.")
}

// Validate reports a half-set certificate pair, naming its flags.
func (c *Client) Validate() error {
	if c.Enabled && (c.CertPath == "") != (c.KeyPath == "") {
		return fmt.Errorf("-%s.tls-cert-path and -%s.tls-key-path must be set together", c.prefix, c.prefix)
	}
	return nil
}

// Credentials returns the gRPC transport credentials: TLS with the files
// read again for every connection, or plaintext when TLS is not enabled. It
// loads the files once, so a bad path fails now.
func (c *Client) Credentials() (credentials.TransportCredentials, error) {
	if !c.Enabled {
		return insecure.NewCredentials(), nil
	}
	r, err := New(Files{CA: c.CAPath, Cert: c.CertPath, Key: c.KeyPath})
	if err != nil {
		return nil, fmt.Errorf("-%s.tls-*: %w", c.prefix, err)
	}
	creds := r.Credentials(c.ServerName).(*reloadingCredentials)
	if c.prefix != "" {
		creds.nameFlag = "-" + c.prefix + ".tls-server-name"
	}
	return creds, nil
}

// Authority returns the dial option that makes gRPC verify ServerName in
// the server's certificate: grpc-go takes the TLS server name from the
// authority of the dial target, whatever the credentials' configuration
// says, so a client that dials 10.0.0.7:9095 checks the certificate for
// 10.0.0.7 unless the authority is the name. Without TLS or a server name
// the option changes nothing.
func (c *Client) Authority() grpc.DialOption {
	if !c.Enabled || c.ServerName == "" {
		return grpc.EmptyDialOption{}
	}
	return grpc.WithAuthority(c.ServerName)
}

// Server is the flag-backed TLS configuration of a server, registered
// under a prefix such as "grpc": -grpc.tls-cert-path and so on. TLS is on
// when a certificate is set; a client CA turns on mutual TLS.
type Server struct {
	CertPath     string
	KeyPath      string
	ClientCAPath string

	prefix string
}

// RegisterFlagsWithPrefix registers the flags as -<prefix>.tls-*; what
// names the server in their help text.
func (s *Server) RegisterFlagsWithPrefix(prefix, what string, f *flag.FlagSet) {
	s.prefix = prefix
	f.StringVar(&s.CertPath, prefix+".tls-cert-path", "", "PEM file of the "+what+"'s certificate chain; setting it (with -"+prefix+".tls-key-path) serves TLS 1.2 or newer instead of plaintext. Re-read when it changes.")
	f.StringVar(&s.KeyPath, prefix+".tls-key-path", "", "PEM file of the private key of -"+prefix+".tls-cert-path.")
	f.StringVar(&s.ClientCAPath, prefix+".tls-client-ca-path", "", "PEM file of the CAs that sign client certificates; setting it requires and verifies a client certificate on every connection to the "+what+" (mutual TLS). Re-read when it changes.")
}

// Enabled reports whether the server serves TLS.
func (s *Server) Enabled() bool { return s.CertPath != "" }

// Validate reports a half-set configuration, naming its flags.
func (s *Server) Validate() error {
	if (s.CertPath == "") != (s.KeyPath == "") {
		return fmt.Errorf("-%s.tls-cert-path and -%s.tls-key-path must be set together", s.prefix, s.prefix)
	}
	if s.ClientCAPath != "" && s.CertPath == "" {
		return fmt.Errorf("-%s.tls-client-ca-path needs -%s.tls-cert-path and -%s.tls-key-path", s.prefix, s.prefix, s.prefix)
	}
	return nil
}

// TLSConfig returns the reloading server configuration offering
// nextProtos, or nil when TLS is not enabled.
func (s *Server) TLSConfig(nextProtos ...string) (*tls.Config, error) {
	if !s.Enabled() {
		return nil, nil
	}
	r, err := New(Files{CA: s.ClientCAPath, Cert: s.CertPath, Key: s.KeyPath})
	if err != nil {
		return nil, fmt.Errorf("-%s.tls-*: %w", s.prefix, err)
	}
	return r.ServerConfig(nextProtos...)
}
