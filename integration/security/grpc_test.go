package security

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/testcerts"
	"github.com/ferrylabs/ferry/internal/tlsreload"
)

// TestPusherMutualTLS runs consumers (on an in-process Kafka: the subject
// is gRPC) against a pusher that requires client certificates.
func TestPusherMutualTLS(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ferry")
	other := testcerts.NewCA(t, "other")
	server := ca.Issue(t, "pusher")
	client := ca.Issue(t, "consumer")
	stranger := other.Issue(t, "stranger")
	pusherAddr := startPusher(t, tlsreload.Server{CertPath: server.CertPath, KeyPath: server.KeyPath, ClientCAPath: ca.CertPath})

	for _, tc := range []struct {
		name  string
		tls   tlsreload.Client
		cause string // "" when the stream must open
	}{
		{"a consumer with a certificate of the client CA gets a stream", tlsreload.Client{Enabled: true, CAPath: ca.CertPath, CertPath: client.CertPath, KeyPath: client.KeyPath}, ""},
		{"a consumer without a client certificate is refused", tlsreload.Client{Enabled: true, CAPath: ca.CertPath}, "certificate required"},
		{"a consumer with a certificate of another CA is refused", tlsreload.Client{Enabled: true, CAPath: ca.CertPath, CertPath: stranger.CertPath, KeyPath: stranger.KeyPath}, "unknown certificate authority"},
		{"a consumer that does not trust the pusher's CA refuses it", tlsreload.Client{Enabled: true, CAPath: other.CertPath, CertPath: client.CertPath, KeyPath: client.KeyPath}, "certificate signed by unknown authority"},
		{"a plaintext consumer is refused", tlsreload.Client{}, "error reading server preface"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cluster, topic := kafkatest.NewFake(t, 1)
			cfg := consumerConfig(cluster.ListenAddrs()[0], topic, pusherAddr)
			cfg.Consumer.PusherTLS = tc.tls
			var logs logBuffer
			p := startConsumer(t, cfg, &logs)
			if tc.cause == "" {
				waitUntil(t, 10*time.Second, "ready", p.Consumer.Ready)
				return
			}
			waitUntil(t, 10*time.Second, "the cause in Ready", func() error {
				err := p.Consumer.Ready()
				if err == nil || !strings.Contains(err.Error(), tc.cause) {
					return errorf("Ready() = %v, want an error containing %q", err, tc.cause)
				}
				return nil
			})
			if !strings.Contains(logs.String(), tc.cause) {
				t.Errorf("the logs do not name the cause %q", tc.cause)
			}
		})
	}
}

// TestPusherCertificateRotation replaces the pusher's certificate files and
// expects the next connection to see the new certificate, without a restart.
func TestPusherCertificateRotation(t *testing.T) {
	t.Parallel()
	ca := testcerts.NewCA(t, "ferry")
	server := ca.Issue(t, "pusher")
	client := ca.Issue(t, "consumer")
	pusherAddr := startPusher(t, tlsreload.Server{CertPath: server.CertPath, KeyPath: server.KeyPath, ClientCAPath: ca.CertPath})
	clientTLS := tlsreload.Client{Enabled: true, CAPath: ca.CertPath, CertPath: client.CertPath, KeyPath: client.KeyPath, ServerName: "pusher"}

	before := testcerts.Serial(t, server.CertPath)
	if got := servedSerial(t, pusherAddr, clientTLS); got != before.String() {
		t.Fatalf("pusher presented serial %s, want %s", got, before)
	}
	ca.IssueTo(t, "pusher", server)
	after := testcerts.Serial(t, server.CertPath)
	if got := servedSerial(t, pusherAddr, clientTLS); got != after.String() {
		t.Fatalf("after rotation the pusher presented serial %s, want the new %s", got, after)
	}
}

// servedSerial makes a health call on a new connection and returns the
// serial number of the certificate the server presented.
func servedSerial(t *testing.T, addr string, c tlsreload.Client) string {
	t.Helper()
	creds, err := c.Credentials()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var p peer.Peer
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil {
		t.Fatalf("health check over mTLS: %v", err)
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		t.Fatalf("peer auth info %T, want TLS", p.AuthInfo)
	}
	return info.State.PeerCertificates[0].SerialNumber.String()
}
