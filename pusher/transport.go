package pusher

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// The gRPC door's memory account. gRPC reads a message into memory before
// any handler sees it: it widens a stream's flow-control window to the
// length the message declares, so a client that announces a large message
// and never finishes it makes the server hold what it sent, and Ferry's
// pending bound (MaxPendingBytes) only sees a message once it is whole.
// What gRPC may hold is therefore bounded by the transport's settings:
//
//   - a message is at most MaxRequestBytes + grpcHeadroom (MaxRecvMsgSize);
//   - a stream holds one message being received, and decoding it needs up
//     to twice its size again for an instant (the codec joins its frames,
//     the envelope keeps its own copy), plus what the stream's window lets
//     the client send ahead (streamWindow) and its headers
//     (maxHeaderListBytes);
//   - the whole server has at most MaxOpenStreams streams open
//     (streamGate), whatever the connections; a stream that a newer one
//     replaces on a full server is cancelled, which frees its message as
//     it ends;
//   - connections are bounded too (connGate), each with gRPC's fixed
//     buffers.
//
// MemoryBound adds it up with the pending bound: one figure for the door.

// grpcHeadroom is what the gRPC transport accepts beyond MaxRequestBytes.
// An oversized request must reach the server so it can be answered with
// CLIENT_ERROR; a transport-level refusal would break the whole stream and
// the consumer would resend it forever. The consumer's PushBatch messages
// (-pusher.max-message-bytes, at most 4 MiB) rely on it.
const grpcHeadroom = 4 << 20

// Flow-control windows of the gRPC server, in bytes. Fixed windows instead
// of gRPC's BDP estimate, which grows a stream's window to 16 MiB: what
// the transport buffers for a stream that is not read is at most its
// window. A message larger than the window still arrives: gRPC widens the
// window for the message a reader is waiting for, up to MaxRecvMsgSize.
// The connection window is not a bound on memory (gRPC returns it as it
// reads frames, read or not): it only caps the data in flight.
const (
	streamWindow = 1 << 20
	connWindow   = 4 << 20
)

// maxHeaderListBytes bounds the headers (metadata) of one call, which the
// stream keeps for its lifetime; gRPC's default is 16 MiB. Ferry's
// clients send a few hundred bytes.
const maxHeaderListBytes = 64 << 10

// DefaultMaxOpenStreams is -grpc.max-open-streams' default: room for a
// few dozen consumers (one stream each) beside health checks and PushOne
// callers, with the door's bound (MemoryBound) near 3 GiB at the other
// defaults.
const DefaultMaxOpenStreams = 64

// Keepalive: the server pings a connection that has been silent for
// keepaliveTime and closes it when the answer takes longer than
// keepaliveTimeout, so a peer that vanished frees its connection and
// streams. Clients may ping every keepaliveMinTime, also without a call
// (the consumer pings every 10 s); faster pings close the connection.
const (
	keepaliveTime    = time.Minute
	keepaliveTimeout = 20 * time.Second
	keepaliveMinTime = 5 * time.Second
)

// maxRecvMsgSize is the largest message gRPC accepts.
func (c *Config) maxRecvMsgSize() int { return c.MaxRequestBytes + grpcHeadroom }

// streamBound is the most memory one open stream can make gRPC and the
// decoding of its message hold, in bytes (see the account above).
func (c *Config) streamBound() int64 {
	return 3*int64(c.maxRecvMsgSize()) + streamWindow + maxHeaderListBytes
}

// MemoryBound is the gRPC door's memory account, in bytes: every open
// stream at its streamBound, plus what all streams and PushOne calls may
// hold unanswered (MaxPendingBytes). Connections add their buffers on
// top: about 30 KiB each when idle, measured, for at most twice
// MaxConnections (see connGate).
func (c *Config) MemoryBound() int64 {
	return int64(c.MaxOpenStreams)*c.streamBound() + c.MaxPendingBytes
}

// transportOptions are the gRPC server options that bound what the
// transport holds and for how long.
func (c *Config) transportOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(c.maxRecvMsgSize()),
		grpc.MaxConcurrentStreams(uint32(c.MaxConcurrentStreams)), //nolint:gosec // Validate caps it at MaxUint32
		grpc.MaxHeaderListSize(maxHeaderListBytes),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		// The handshake (TLS, then HTTP/2's preface and settings) must
		// end within it; gRPC's default is 120 s.
		grpc.ConnectionTimeout(c.HandshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: c.MaxConnectionIdle,
			Time:              keepaliveTime,
			Timeout:           keepaliveTimeout,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true}),
	}
}
