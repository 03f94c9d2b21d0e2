package pusher

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// streamGate bounds the streams (calls) open on the whole server: gRPC's
// own bound, MaxConcurrentStreams, is per connection, so connections ×
// streams could each hold a message being received. It admits a stream
// in gRPC's tap, when its headers have arrived and before any of its
// message is read.
//
// When the server is full, a new stream takes the place of the one that
// has gone longest without delivering a message, if that is longer than
// staleAfter: a client that starts messages and never finishes them
// holds its places only until someone needs them, while streams that
// deliver keep theirs. Otherwise the new stream is refused with
// RESOURCE_EXHAUSTED, which clients retry. A stream made room for ends
// with CANCELLED; a consumer opens a new one and sends again what was in
// flight.
type streamGate struct {
	max     int
	conns   *connGate // told of each stream's start and end
	metrics *transportMetrics
	epoch   time.Time // the clock of streamSlot.last, monotonic

	mu   sync.Mutex
	open map[*streamSlot]struct{}
}

// staleAfter is how long an open stream may go without delivering a
// message before a new stream may take its place on a full server. A
// consumer's stream delivers whenever it has records; one idle longer
// loses nothing in flight.
const staleAfter = time.Second

// streamSlot is one admitted stream.
type streamSlot struct {
	cancel context.CancelFunc
	// last is when the stream was admitted or last delivered a message,
	// in nanoseconds since the gate's epoch.
	last atomic.Int64
}

// slotKey is the context key of a stream's slot.
type slotKey struct{}

// errTooManyStreams answers a call beyond -grpc.max-open-streams.
var errTooManyStreams = status.Error(codes.ResourceExhausted, "pusher: too many calls and streams open on the server (-grpc.max-open-streams); retry later")

// newStreamGate returns a gate admitting max streams, telling conns of
// each stream's start and end.
func newStreamGate(max int, conns *connGate, m *transportMetrics) *streamGate {
	return &streamGate{max: max, conns: conns, metrics: m, epoch: time.Now(), open: make(map[*streamSlot]struct{}, min(max, 1024))}
}

// serverOptions install the gate: the tap admits, interceptors first in
// their chains mark delivered messages.
func (g *streamGate) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InTapHandle(g.admit),
		grpc.ChainUnaryInterceptor(g.unaryDelivered),
		grpc.ChainStreamInterceptor(g.streamDelivered),
	}
}

// now is the gate's clock.
func (g *streamGate) now() int64 { return int64(time.Since(g.epoch)) }

// admit takes a place for a new stream, making one or refusing it when
// the server is full. The place is given back when the stream's context
// ends: gRPC derives the stream's context from the one the tap returns
// and cancels it whenever the stream ends, however it ends. admit runs
// under the connection's lock, so it does little.
func (g *streamGate) admit(ctx context.Context, _ *tap.Info) (context.Context, error) {
	now := g.now()
	g.mu.Lock()
	var stale *streamSlot
	if len(g.open) >= g.max {
		if stale = g.stalest(now); stale == nil {
			g.mu.Unlock()
			g.metrics.refusedStreams.Inc()
			return nil, errTooManyStreams
		}
		delete(g.open, stale)
		g.metrics.openStreams.Dec()
	}
	ctx, cancel := context.WithCancel(ctx)
	slot := &streamSlot{cancel: cancel}
	slot.last.Store(now)
	g.open[slot] = struct{}{}
	g.mu.Unlock()
	g.metrics.openStreams.Inc()
	if stale != nil {
		g.metrics.staleStreams.Inc()
		stale.cancel()
	}
	conn := g.conns.streamOpened(ctx)
	context.AfterFunc(ctx, func() {
		g.release(slot)
		g.conns.streamClosed(conn)
	})
	return context.WithValue(ctx, slotKey{}, slot), nil
}

// stalest returns the open stream longest without a message, if that is
// longer than staleAfter; g.mu is held.
func (g *streamGate) stalest(now int64) *streamSlot {
	var oldest *streamSlot
	for s := range g.open {
		if oldest == nil || s.last.Load() < oldest.last.Load() {
			oldest = s
		}
	}
	if oldest == nil || now-oldest.last.Load() < int64(staleAfter) {
		return nil
	}
	return oldest
}

// release gives a stream's place back, unless a newer stream took it.
func (g *streamGate) release(s *streamSlot) {
	g.mu.Lock()
	_, ok := g.open[s]
	delete(g.open, s)
	g.mu.Unlock()
	if ok {
		g.metrics.openStreams.Dec()
	}
	s.cancel()
}

// slotOf returns the slot of the stream of ctx, or nil.
func slotOf(ctx context.Context) *streamSlot {
	s, _ := ctx.Value(slotKey{}).(*streamSlot)
	return s
}

// unaryDelivered marks a unary call's request, which gRPC has read by the
// time interceptors run.
func (g *streamGate) unaryDelivered(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if s := slotOf(ctx); s != nil {
		s.last.Store(g.now())
	}
	return handler(ctx, req)
}

// streamDelivered marks every message a stream delivers.
func (g *streamGate) streamDelivered(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	s := slotOf(ss.Context())
	if s == nil {
		return handler(srv, ss)
	}
	return handler(srv, deliveringStream{ss, g, s})
}

// deliveringStream is a server stream that marks each message it
// delivers in its slot.
type deliveringStream struct {
	grpc.ServerStream
	gate *streamGate
	slot *streamSlot
}

// RecvMsg receives a message and marks its delivery.
func (s deliveringStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.slot.last.Store(s.gate.now())
	}
	return err
}
