// Package kafkaclient is the one configuration of how every Ferry process
// connects to Kafka: TLS and SASL. The consumer (and its dead-letter
// producer and re-reader), ferry-loadgen and dev mode all register it, so
// a secured cluster is reached the same way by each of them.
package kafkaclient

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/ferrylabs/ferry/internal/tlsreload"
)

// SASL mechanisms accepted by -kafka.sasl-mechanism.
const (
	MechanismPlain       = "PLAIN"
	MechanismScramSHA256 = "SCRAM-SHA-256"
	MechanismScramSHA512 = "SCRAM-SHA-512"
)

// EnvPassword is the environment variable holding the SASL password when
// -kafka.sasl-password-file is not set. A password is never a flag value:
// flags show in ps and in flag dumps.
const EnvPassword = "FERRY_KAFKA_SASL_PASSWORD" //nolint:gosec // a variable's name, not a credential

// dialTimeout bounds a TCP connect, as kgo's default dialer does.
const dialTimeout = 10 * time.Second

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("kafka client")

// Config is how a client connects to Kafka beyond the broker addresses.
// Its zero value is plaintext without authentication.
type Config struct {
	TLSEnabled            bool
	TLSCAPath             string
	TLSCertPath           string
	TLSKeyPath            string
	TLSServerName         string
	TLSInsecureSkipVerify bool

	SASLMechanism    string
	SASLUsername     string
	SASLPasswordFile string

	// Password, when set, is used instead of the file and the environment:
	// for tests and callers that hold the secret already.
	Password Secret
}

// Secret is a string that never prints: fmt, slog and JSON all see
// "[redacted]", so a logged or dumped Config cannot leak it.
type Secret string

const redacted = "[redacted]"

// String implements fmt.Stringer.
func (Secret) String() string { return redacted }

// GoString implements fmt.GoStringer (%#v).
func (Secret) GoString() string { return redacted }

// MarshalText keeps the secret out of JSON, YAML and slog text.
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// RegisterFlags registers the flags on f.
func (c *Config) RegisterFlags(f *flag.FlagSet) {
	f.BoolVar(&c.TLSEnabled, "kafka.tls-enabled", false, "Connect to Kafka over TLS (1.2 or newer). The -kafka.tls-* paths take effect only with it.")
	f.StringVar(&c.TLSCAPath, "kafka.tls-ca-path", "", "PEM file of the CAs trusted to sign the brokers' certificates; empty trusts the system roots. Re-read when it changes.")
	f.StringVar(&c.TLSCertPath, "kafka.tls-cert-path", "", "PEM file of the client certificate presented to the brokers (mutual TLS), with -kafka.tls-key-path. Re-read when it changes.")
	f.StringVar(&c.TLSKeyPath, "kafka.tls-key-path", "", "PEM file of the private key of -kafka.tls-cert-path.")
	f.StringVar(&c.TLSServerName, "kafka.tls-server-name", "", "Name expected in the brokers' certificates; empty uses each broker's host name.")
	f.BoolVar(&c.TLSInsecureSkipVerify, "kafka.tls-insecure-skip-verify", false, "Accept any broker certificate. Anyone on the path can then read and change the traffic: for tests only.")
	f.StringVar(&c.SASLMechanism, "kafka.sasl-mechanism", "", "SASL mechanism to authenticate with: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; empty disables SASL. Use TLS with PLAIN: it sends the password as is.")
	f.StringVar(&c.SASLUsername, "kafka.sasl-username", "", "SASL user name.")
	f.StringVar(&c.SASLPasswordFile, "kafka.sasl-password-file", "", "File holding the SASL password (a trailing newline is ignored), read again for every new connection. Without it the password comes from the environment variable "+EnvPassword+".")
}

// Validate reports the first invalid setting, naming its flag. It reads the
// password, so a missing file fails at start-up.
func (c *Config) Validate() error {
	if c.TLSEnabled {
		if (c.TLSCertPath == "") != (c.TLSKeyPath == "") {
			return fmt.Errorf("%w: -kafka.tls-cert-path and -kafka.tls-key-path must be set together", ErrInvalidConfig)
		}
	}
	switch c.SASLMechanism {
	case "":
		if c.SASLUsername != "" || c.SASLPasswordFile != "" {
			return fmt.Errorf("%w: -kafka.sasl-username and -kafka.sasl-password-file need -kafka.sasl-mechanism", ErrInvalidConfig)
		}
		return nil
	case MechanismPlain, MechanismScramSHA256, MechanismScramSHA512:
	default:
		return fmt.Errorf("%w: -kafka.sasl-mechanism must be %s, %s or %s, got %q", ErrInvalidConfig, MechanismPlain, MechanismScramSHA256, MechanismScramSHA512, c.SASLMechanism)
	}
	if c.SASLUsername == "" {
		return fmt.Errorf("%w: -kafka.sasl-username must be set with -kafka.sasl-mechanism", ErrInvalidConfig)
	}
	_, err := c.password()
	return err
}

// password returns the SASL password: Password, else the file, else the
// environment variable. Errors never quote it.
func (c *Config) password() (string, error) {
	if c.Password != "" {
		return string(c.Password), nil
	}
	if c.SASLPasswordFile != "" {
		b, err := os.ReadFile(c.SASLPasswordFile)
		if err != nil {
			return "", fmt.Errorf("%w: -kafka.sasl-password-file: %w", ErrInvalidConfig, err)
		}
		p := strings.TrimRight(string(b), "\r\n")
		if p == "" {
			return "", fmt.Errorf("%w: -kafka.sasl-password-file %s is empty", ErrInvalidConfig, c.SASLPasswordFile)
		}
		return p, nil
	}
	if p := os.Getenv(EnvPassword); p != "" {
		return p, nil
	}
	return "", fmt.Errorf("%w: -kafka.sasl-mechanism %s needs a password: set -kafka.sasl-password-file or %s", ErrInvalidConfig, c.SASLMechanism, EnvPassword)
}

// Opts returns the kgo options that connect as configured: none for the
// zero Config. The TLS files are loaded now, so a bad path fails here.
func (c *Config) Opts() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if c.TLSEnabled {
		r, err := tlsreload.New(tlsreload.Files{CA: c.TLSCAPath, Cert: c.TLSCertPath, Key: c.TLSKeyPath})
		if err != nil {
			return nil, fmt.Errorf("kafka TLS: %w", err)
		}
		// A dialer rather than kgo.DialTLSConfig: each connection gets a
		// configuration made from the files as they are then.
		opts = append(opts, kgo.Dialer(r.Dialer(c.TLSServerName, c.TLSInsecureSkipVerify, dialTimeout)))
	}
	if c.SASLMechanism != "" {
		m, err := c.mechanism()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// mechanism returns the SASL mechanism. The password is read again for
// every connection that authenticates, so a rotated password file is used
// without a restart.
func (c *Config) mechanism() (sasl.Mechanism, error) {
	if _, err := c.password(); err != nil {
		return nil, err
	}
	cfg := *c
	user := c.SASLUsername
	switch c.SASLMechanism {
	case MechanismPlain:
		return plain.Plain(func(context.Context) (plain.Auth, error) {
			pass, err := cfg.password()
			return plain.Auth{User: user, Pass: pass}, err
		}), nil
	case MechanismScramSHA256, MechanismScramSHA512:
		auth := func(context.Context) (scram.Auth, error) {
			pass, err := cfg.password()
			return scram.Auth{User: user, Pass: pass}, err
		}
		if c.SASLMechanism == MechanismScramSHA256 {
			return scram.Sha256(auth), nil
		}
		return scram.Sha512(auth), nil
	default:
		return nil, fmt.Errorf("%w: unknown -kafka.sasl-mechanism %q", ErrInvalidConfig, c.SASLMechanism)
	}
}

// String describes the configuration without the password, for logs.
func (c Config) String() string {
	var b strings.Builder
	b.WriteString("kafka client: ")
	if c.TLSEnabled {
		fmt.Fprintf(&b, "TLS (ca=%q cert=%q server-name=%q skip-verify=%t)", c.TLSCAPath, c.TLSCertPath, c.TLSServerName, c.TLSInsecureSkipVerify)
	} else {
		b.WriteString("plaintext")
	}
	if c.SASLMechanism != "" {
		fmt.Fprintf(&b, ", SASL %s as %q (password %s)", c.SASLMechanism, c.SASLUsername, redacted)
	}
	return b.String()
}

// GoString keeps %#v from printing the fields one by one.
func (c Config) GoString() string { return c.String() }
