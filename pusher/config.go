package pusher

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"time"

	"github.com/ferrylabs/ferry/internal/tlsreload"
)

// Config is the push service's configuration.
type Config struct {
	GRPCListenAddress string
	MaxInflight       int
	MaxRequestBytes   int
	ShutdownTimeout   time.Duration
	Limits            Limits
	// TLS secures the gRPC listener; with a client CA it requires client
	// certificates (mutual TLS).
	TLS tlsreload.Server
}

// Limits are the checks that need no storage, applied to every request.
type Limits struct {
	MaxLabelsPerSeries  int
	MaxLabelNameLength  int
	MaxLabelValueLength int
	// CreationGracePeriod is how far in the future a sample may be.
	CreationGracePeriod time.Duration
}

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("invalid configuration")

// RegisterFlags registers the pusher's flags on f.
func (c *Config) RegisterFlags(f *flag.FlagSet) {
	f.StringVar(&c.GRPCListenAddress, "grpc.listen-address", ":9095", "Address the gRPC server listens on.")
	f.IntVar(&c.MaxInflight, "pusher.max-inflight-requests", 1024, "Requests applied at once; beyond it requests are answered SERVER_ERROR with a retry-after hint.")
	f.IntVar(&c.MaxRequestBytes, "pusher.max-request-bytes", 10<<20, "Largest accepted request, in bytes; larger requests are answered CLIENT_ERROR.")
	f.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "How long a graceful stop may wait for in-flight requests before connections are cut.")
	c.TLS.RegisterFlagsWithPrefix("grpc", "gRPC server", f)
	c.Limits.RegisterFlags(f)
}

// RegisterFlags registers the limits' flags on f.
func (l *Limits) RegisterFlags(f *flag.FlagSet) {
	f.IntVar(&l.MaxLabelsPerSeries, "limits.max-labels-per-series", 30, "Most labels a series may have, its name included.")
	f.IntVar(&l.MaxLabelNameLength, "limits.max-label-name-length", 1024, "Longest label name, in bytes.")
	f.IntVar(&l.MaxLabelValueLength, "limits.max-label-value-length", 2048, "Longest label value, in bytes.")
	f.DurationVar(&l.CreationGracePeriod, "limits.creation-grace-period", 10*time.Minute, "How far in the future a sample's timestamp may be.")
}

// Validate reports the first invalid setting, naming its flag.
func (c *Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.GRPCListenAddress); err != nil {
		return fmt.Errorf("%w: -grpc.listen-address %q: %w", ErrInvalidConfig, c.GRPCListenAddress, err)
	}
	if c.MaxInflight <= 0 {
		return fmt.Errorf("%w: -pusher.max-inflight-requests must be positive, got %d", ErrInvalidConfig, c.MaxInflight)
	}
	if c.MaxRequestBytes <= 0 {
		return fmt.Errorf("%w: -pusher.max-request-bytes must be positive, got %d", ErrInvalidConfig, c.MaxRequestBytes)
	}
	if err := c.TLS.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if c.ShutdownTimeout <= 0 {
		return fmt.Errorf("%w: -shutdown-timeout must be positive, got %s", ErrInvalidConfig, c.ShutdownTimeout)
	}
	return c.Limits.Validate()
}

// Validate reports the first invalid limit, naming its flag.
func (l *Limits) Validate() error {
	for _, v := range []struct {
		flag  string
		value int
	}{
		{"-limits.max-labels-per-series", l.MaxLabelsPerSeries},
		{"-limits.max-label-name-length", l.MaxLabelNameLength},
		{"-limits.max-label-value-length", l.MaxLabelValueLength},
	} {
		if v.value <= 0 {
			return fmt.Errorf("%w: %s must be positive, got %d", ErrInvalidConfig, v.flag, v.value)
		}
	}
	if l.CreationGracePeriod < 0 {
		return fmt.Errorf("%w: -limits.creation-grace-period must not be negative, got %s", ErrInvalidConfig, l.CreationGracePeriod)
	}
	return nil
}
