package testcerts

import (
	"crypto/tls"
	"testing"
	"time"
)

// Serve accepts TLS connections with cfg on a loopback port until the test
// ends and returns its address. Each connection finishes its handshake, so
// the client learns the server's verdict on its certificate, and a
// connection that passed gets one byte ("x") before it is closed.
func Serve(t testing.TB, cfg *tls.Config) string {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if c.(*tls.Conn).Handshake() == nil {
					_, _ = c.Write([]byte("x"))
				}
			}()
		}
	}()
	return lis.Addr().String()
}
