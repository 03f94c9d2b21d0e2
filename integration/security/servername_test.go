package security

import (
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/testcerts"
	"github.com/ferrylabs/ferry/internal/tlsreload"
)

// TestAConsumerDiallingThePusherByAddressVerifiesTheConfiguredServerName
// dials the pusher at 127.0.0.1 while its certificate names a DNS name
// only: with -pusher.tls-server-name set to that name the stream opens,
// without it the consumer refuses the pusher and says why.
func TestAConsumerDiallingThePusherByAddressVerifiesTheConfiguredServerName(t *testing.T) {
	t.Parallel()
	const name = "pusher.ferry.test"
	ca := testcerts.NewCA(t, "ferry")
	server := ca.IssueDNSOnly(t, name)
	pusherAddr := startPusher(t, tlsreload.Server{CertPath: server.CertPath, KeyPath: server.KeyPath})
	if !strings.HasPrefix(pusherAddr, "127.0.0.1:") {
		t.Fatalf("pusher listens on %s, want an IP address", pusherAddr)
	}

	for _, tc := range []struct {
		name       string
		serverName string
		cause      string // "" when the stream must open
	}{
		{"with the name set the stream opens", name, ""},
		{"without it the address is verified and refused", "", "doesn't contain any IP SANs: the certificate names " + name + "; set -pusher.tls-server-name to one of them"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cluster, topic := kafkatest.NewFake(t, 1)
			cfg := consumerConfig(cluster.ListenAddrs()[0], topic, pusherAddr)
			// Set field by field: the flags' prefix names them in errors.
			cfg.Consumer.PusherTLS.Enabled = true
			cfg.Consumer.PusherTLS.CAPath = ca.CertPath
			cfg.Consumer.PusherTLS.ServerName = tc.serverName
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
		})
	}
}
