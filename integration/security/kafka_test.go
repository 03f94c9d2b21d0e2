package security

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/kafkaclient"
	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/internal/testcerts"
	"github.com/ferrylabs/ferry/internal/tlsreload"
)

// TestSecuredKafka runs consumers against one broker that requires
// SASL_SSL; its subtests share the broker and run in parallel.
func TestSecuredKafka(t *testing.T) {
	s := kafkatest.StartSecure(t)
	pusherAddr := startPusher(t, tlsreload.Server{})
	secure := kafkaclient.Config{
		TLSEnabled: true,
		TLSCAPath:  s.CA.CertPath,
		// The client certificate is requested by the broker, not required:
		// presenting it checks the client side of mutual TLS too.
		TLSCertPath:  s.ClientCert.CertPath,
		TLSKeyPath:   s.ClientCert.KeyPath,
		SASLUsername: kafkatest.SecureUser,
	}
	passwordFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(passwordFile, []byte(s.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("consumes and dead-letters", func(t *testing.T) {
		for _, mech := range []string{kafkaclient.MechanismPlain, kafkaclient.MechanismScramSHA256, kafkaclient.MechanismScramSHA512} {
			t.Run("with "+mech, func(t *testing.T) {
				t.Parallel()
				kc := secure
				kc.SASLMechanism = mech
				kc.SASLPasswordFile = passwordFile
				consumeAndDeadLetter(t, s, kc, pusherAddr)
			})
		}
	})

	t.Run("reads a corrected password file without a restart", func(t *testing.T) {
		t.Parallel()
		file := filepath.Join(t.TempDir(), "password")
		if err := os.WriteFile(file, []byte("wrong\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		kc := secure
		kc.SASLMechanism = kafkaclient.MechanismScramSHA512
		kc.SASLPasswordFile = file
		cfg := consumerConfig(s.SecureAddr, s.CreateTopic(t, 1), pusherAddr)
		cfg.Consumer.Kafka = kc
		var logs logBuffer
		p := startConsumer(t, cfg, &logs)
		waitUntil(t, 10*time.Second, "the wrong password refused", func() error {
			if err := p.Consumer.Ready(); err == nil || !strings.Contains(err.Error(), "SASL_AUTHENTICATION_FAILED") {
				return errorf("Ready() = %v", err)
			}
			return nil
		})
		if err := os.WriteFile(file, []byte(s.Password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, 30*time.Second, "ready with the corrected password", p.Consumer.Ready)
	})

	t.Run("fails clearly", func(t *testing.T) {
		other := testcerts.NewCA(t, "other")
		for _, tc := range []struct {
			name  string
			addr  string
			edit  func(*kafkaclient.Config)
			cause string
		}{
			{"with a wrong password", s.SecureAddr, func(c *kafkaclient.Config) { c.Password = "not-the-password" }, "SASL_AUTHENTICATION_FAILED"},
			{"with a broker certificate from an untrusted CA", s.SecureAddr, func(c *kafkaclient.Config) { c.TLSCAPath = other.CertPath }, "certificate signed by unknown authority"},
			{"with TLS to a plaintext listener", s.Addrs()[0], func(*kafkaclient.Config) {}, "using TLS when the broker is not expecting it"},
			{"with plaintext to a TLS listener", s.SecureAddr, func(c *kafkaclient.Config) { c.TLSEnabled = false }, "plaintext connection speaking to a tls endpoint"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				kc := secure
				kc.SASLMechanism = kafkaclient.MechanismScramSHA256
				kc.Password = kafkaclient.Secret(s.Password)
				tc.edit(&kc)
				cfg := consumerConfig(tc.addr, "any-topic", pusherAddr)
				cfg.Consumer.Kafka = kc
				var logs logBuffer
				p := startConsumer(t, cfg, &logs)
				// Seconds, not the minutes of a retry loop that hides why.
				waitUntil(t, 10*time.Second, "the cause in Ready", func() error {
					err := p.Consumer.Ready()
					if err == nil || !strings.Contains(err.Error(), tc.cause) {
						return errorf("Ready() = %v, want an error containing %q", err, tc.cause)
					}
					return nil
				})
				if !strings.Contains(logs.String(), tc.cause) {
					t.Errorf("the logs do not name the cause %q:\n%s", tc.cause, logs.String())
				}
				if strings.Contains(logs.String(), s.Password) {
					t.Error("the logs hold the SASL password")
				}
			})
		}
	})
}

// consumeAndDeadLetter produces three good records and one undecodable one
// over plaintext, then runs a consumer configured with kc: it must commit
// all four and write the bad one to the dead-letter topic, both through
// the SASL_SSL listener, without the password in its logs.
func consumeAndDeadLetter(t *testing.T, s *kafkatest.Secure, kc kafkaclient.Config, pusherAddr string) {
	t.Helper()
	topic := s.CreateTopic(t, 1)
	dlq := s.CreateTopic(t, 1)
	shape := loadgen.Shape{Series: 2, StartMs: time.Now().Add(-time.Hour).UnixMilli(), StepMs: 1000}
	var recs []*kgo.Record
	for step := range 3 {
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte("tenant-a"), Value: shape.Marshal("tenant-a", step)})
	}
	recs = append(recs, &kgo.Record{Topic: topic, Key: []byte("tenant-a"), Value: []byte("not a write request")})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Client(t).ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	cfg := consumerConfig(s.SecureAddr, topic, pusherAddr)
	cfg.Consumer.Kafka = kc
	cfg.Consumer.DLQTopic = dlq
	var logs logBuffer
	startConsumer(t, cfg, &logs)

	waitUntil(t, 30*time.Second, "all four records committed", func() error {
		if got := s.CommittedOffsets(t, "security-test", topic)[0]; got != 4 {
			return errorf("committed offset %d, want 4", got)
		}
		return nil
	})
	if got := s.EndOffsets(t, dlq)[0]; got != 1 {
		t.Errorf("dead-letter topic holds %d records, want 1", got)
	}
	if strings.Contains(logs.String(), s.Password) {
		t.Error("the logs hold the SASL password")
	}
}
