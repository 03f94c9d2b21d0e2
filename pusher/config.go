package pusher

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"time"

	"github.com/ferrylabs/ferry/internal/tlsreload"
	"github.com/ferrylabs/ferry/limits"
)

// Config is the push service's configuration.
type Config struct {
	GRPCListenAddress string
	MaxInflight       int
	MaxRequestBytes   int
	ShutdownTimeout   time.Duration
	Limits            limits.Limits
	// TLS secures the gRPC listener; with a client CA it requires client
	// certificates (mutual TLS).
	TLS tlsreload.Server

	// MaxPendingPerStream bounds the requests one Push stream holds
	// unanswered: received and not yet answered (being applied, waiting
	// behind their tenant, or answered into a send that the client does not
	// read). At the bound the stream stops reading, so gRPC's flow control
	// pushes back on the client.
	MaxPendingPerStream int
	// MaxPendingBytes bounds what all streams and PushOne calls hold
	// unanswered, in bytes: each request counts its encoded size plus
	// pendingOverhead.
	MaxPendingBytes int64
	// MaxConcurrentStreams is gRPC's bound on streams (calls) per
	// connection.
	MaxConcurrentStreams int
	// MaxOpenStreams bounds the streams (calls) open at once on the whole
	// server. Each may hold a message being received, up to
	// MaxRequestBytes plus grpcHeadroom, which gRPC buffers before any
	// handler sees it: this is what bounds that memory (see MemoryBound).
	MaxOpenStreams int
	// MaxConnections bounds the gRPC connections served at once, counted
	// from the end of their handshake (see connGate); a connection beyond
	// it replaces one idle for over a second, or is closed at once.
	MaxConnections int
	// HandshakeTimeout is how long a new connection has to finish its TLS
	// handshake and send HTTP/2's preface and settings.
	HandshakeTimeout time.Duration
	// MaxConnectionIdle closes a connection that has had no call for this
	// long, so that idle connections do not keep MaxConnections spent.
	MaxConnectionIdle time.Duration
	// MaxBatchRequests and MaxBatchBytes bound the sequenced requests of a
	// tenant that are applied together (one commit with a backend that
	// batches, see backend.BatchPusher): at most this many, and at most
	// this many encoded bytes unless the first request alone is larger.
	MaxBatchRequests int
	MaxBatchBytes    int
}

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("invalid configuration")

// RegisterFlags registers the pusher's flags on f.
func (c *Config) RegisterFlags(f *flag.FlagSet) {
	f.StringVar(&c.GRPCListenAddress, "grpc.listen-address", ":9095", "Address the gRPC server listens on.")
	f.IntVar(&c.MaxInflight, "pusher.max-inflight-requests", 1024, "Requests applied at once; beyond it requests are answered SERVER_ERROR with a retry-after hint.")
	f.IntVar(&c.MaxRequestBytes, "pusher.max-request-bytes", 10<<20, "Largest accepted request, in bytes; larger requests are answered CLIENT_ERROR. A gRPC message over it plus 4 MiB fails its call (RESOURCE_EXHAUSTED) before it is read.")
	f.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "How long a graceful stop may wait for in-flight requests before connections are cut.")
	c.TLS.RegisterFlagsWithPrefix("grpc", "gRPC server", f)
	c.Limits.RegisterFlags(f)
	f.IntVar(&c.MaxPendingPerStream, "pusher.max-pending-per-stream", 1024, "Requests one Push stream may hold unanswered; at the bound the pusher stops reading the stream until answers are sent, so a client that never reads its answers is held back by gRPC flow control.")
	f.Int64Var(&c.MaxPendingBytes, "pusher.max-pending-bytes", 512<<20, "Bytes of requests all streams and PushOne calls may hold unanswered (each request counts its size plus 8 KiB); at the bound streams stop reading and PushOne is answered SERVER_ERROR.")
	f.IntVar(&c.MaxConcurrentStreams, "grpc.max-concurrent-streams", 100, "Streams and calls one gRPC connection may have open at once.")
	f.IntVar(&c.MaxOpenStreams, "grpc.max-open-streams", DefaultMaxOpenStreams, "Streams and calls open at once on the whole gRPC server, all connections together; a call beyond it takes the place of the stream longest without a message if that is over a second (which ends CANCELLED), else it is refused RESOURCE_EXHAUSTED. Each may hold one message being received (up to -pusher.max-request-bytes plus 4 MiB) and its decoding, so this bounds gRPC's own memory; a consumer keeps one stream open.")
	f.IntVar(&c.MaxConnections, "grpc.max-connections", 256, "gRPC connections served at once, counted once their TLS handshake and HTTP/2 preface are done; a connection beyond it takes the place of the one longest without a call if that is over a second, else it is closed at once. As many again may be in their handshake; one more closes the oldest of them.")
	f.DurationVar(&c.HandshakeTimeout, "grpc.handshake-timeout", 5*time.Second, "How long a new gRPC connection has to finish its TLS handshake and send HTTP/2's preface; a connection that has not is closed.")
	f.DurationVar(&c.MaxConnectionIdle, "grpc.max-connection-idle", 2*time.Minute, "A gRPC connection without a call for this long is closed (GOAWAY; clients reconnect when they need to).")
	f.IntVar(&c.MaxBatchRequests, "pusher.max-batch-requests", 16, "Most queued sequenced requests of a tenant applied together, with one commit when the backend batches (tsdb); 1 applies each alone.")
	f.IntVar(&c.MaxBatchBytes, "pusher.max-batch-bytes", 4<<20, "Most encoded bytes of requests applied together (see -pusher.max-batch-requests); a larger request is applied alone.")
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
	if err := c.validateBounds(); err != nil {
		return err
	}
	if c.ShutdownTimeout <= 0 {
		return fmt.Errorf("%w: -shutdown-timeout must be positive, got %s", ErrInvalidConfig, c.ShutdownTimeout)
	}
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// validateBounds checks the bounds on what the server holds.
func (c *Config) validateBounds() error {
	for _, v := range []struct {
		flag  string
		value int64
	}{
		{"-pusher.max-pending-per-stream", int64(c.MaxPendingPerStream)},
		{"-pusher.max-pending-bytes", c.MaxPendingBytes},
		{"-grpc.max-concurrent-streams", int64(c.MaxConcurrentStreams)},
		{"-grpc.max-open-streams", int64(c.MaxOpenStreams)},
		{"-grpc.max-connections", int64(c.MaxConnections)},
		{"-pusher.max-batch-requests", int64(c.MaxBatchRequests)},
		{"-pusher.max-batch-bytes", int64(c.MaxBatchBytes)},
	} {
		if v.value <= 0 {
			return fmt.Errorf("%w: %s must be positive, got %d", ErrInvalidConfig, v.flag, v.value)
		}
	}
	for _, v := range []struct {
		flag  string
		value time.Duration
	}{
		{"-grpc.handshake-timeout", c.HandshakeTimeout},
		{"-grpc.max-connection-idle", c.MaxConnectionIdle},
	} {
		if v.value <= 0 {
			return fmt.Errorf("%w: %s must be positive, got %s", ErrInvalidConfig, v.flag, v.value)
		}
	}
	if c.MaxConcurrentStreams > math.MaxUint32 {
		return fmt.Errorf("%w: -grpc.max-concurrent-streams must be at most %d, got %d", ErrInvalidConfig, uint32(math.MaxUint32), c.MaxConcurrentStreams)
	}
	return nil
}
