package pusher

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// streamGate bounds the streams (calls) open on the whole server: gRPC's
// own bound, MaxConcurrentStreams, is per connection, so connections ×
// streams could each hold a message being received. It admits a stream
// in gRPC's tap, when its headers have arrived and before any of its
// message is read, and refuses one beyond the bound with
// RESOURCE_EXHAUSTED, which clients retry.
type streamGate struct {
	max     int64
	metrics *transportMetrics
	open    atomic.Int64
}

// errTooManyStreams answers a call beyond -grpc.max-open-streams.
var errTooManyStreams = status.Error(codes.ResourceExhausted, "pusher: too many calls and streams open on the server (-grpc.max-open-streams); retry later")

// serverOption installs the gate as the server's tap.
func (g *streamGate) serverOption() grpc.ServerOption {
	return grpc.InTapHandle(g.admit)
}

// admit takes a slot for a new stream, or refuses it. The slot is given
// back when the stream's context ends: gRPC derives the context the tap
// returns from the stream's own, which it cancels whenever the stream
// ends, however it ends. admit runs under the connection's lock, so it
// only counts.
func (g *streamGate) admit(ctx context.Context, _ *tap.Info) (context.Context, error) {
	if g.open.Add(1) > g.max {
		g.open.Add(-1)
		g.metrics.refusedStreams.Inc()
		return nil, errTooManyStreams
	}
	g.metrics.openStreams.Inc()
	context.AfterFunc(ctx, func() {
		g.open.Add(-1)
		g.metrics.openStreams.Dec()
	})
	return ctx, nil
}
