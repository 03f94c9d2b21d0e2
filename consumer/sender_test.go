package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferrylabs/ferry/internal/backoff"
	"github.com/ferrylabs/ferry/internal/testcerts"
	"github.com/ferrylabs/ferry/internal/tlsreload"
)

// TestSenderExplainsARefusedCertificate checks that a stream that failed to
// open with gRPC's uninformative "broken pipe" (what a TLS 1.3 client sees
// when the pusher's refusal of its certificate races its first write) is
// reported with the pusher's verdict, and that other failures are left as
// they are.
func TestSenderExplainsARefusedCertificate(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ferry")
	other := testcerts.NewCA(t, "other")
	server := ca.Issue(t, "pusher")
	stranger := other.Issue(t, "stranger")

	srvTLS := tlsreload.Server{CertPath: server.CertPath, KeyPath: server.KeyPath, ClientCAPath: ca.CertPath}
	cfg, err := srvTLS.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	addr := testcerts.Serve(t, cfg)

	s, err := newSender(addr, "t", messageBounds{}, tlsreload.Client{Enabled: true, CAPath: ca.CertPath, CertPath: stranger.CertPath, KeyPath: stranger.KeyPath, ServerName: "pusher"},
		backoff.Policy{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.conn.Close() })

	pipe := fmt.Errorf("open stream: %w", status.Error(codes.Unavailable, "write tcp: broken pipe"))
	if got := s.explain(context.Background(), pipe); !errors.Is(got, pipe) || !strings.Contains(got.Error(), "unknown certificate authority") {
		t.Errorf("explain(broken pipe) = %v, want it wrapped with the pusher's verdict", got)
	}
	denied := fmt.Errorf("open stream: %w", status.Error(codes.PermissionDenied, "no"))
	if got := s.explain(context.Background(), denied); got.Error() != denied.Error() {
		t.Errorf("explain(PermissionDenied) = %v, want it unchanged", got)
	}
}
