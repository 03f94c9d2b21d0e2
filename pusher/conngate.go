package pusher

import (
	"container/list"
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// connGate bounds the gRPC connections so that connections that never
// finish their handshake, or idle after it, cannot spend the bound and
// lock clients out. A connection is in one of two classes:
//
//	accepted ──(TLS handshake, then HTTP/2's preface read)──▶ established ──▶ closed
//	   │                                          │                 │
//	   └─ evicted: the oldest, when handshakes    └─ refused: full,  └─ replaced: the one longest
//	      are full ──▶ closed                        none idle ──▶      without a call, when full
//	                                                 closed             ──▶ closed
//
// Established connections are at most maxConns. One that finishes its
// handshake beyond that takes the place of the established connection
// that has been without a call longest, if that is over staleAfter (the
// streamGate tells the gate of calls), and is closed at once otherwise,
// instead of waiting in accept: connections that only idle hold the bound
// until someone needs it.
//
// Connections still in their handshake are at most maxConns too, and a new
// one beyond that evicts the oldest: a client that connects and finishes
// its handshake promptly gets through however many connections sit idle
// before theirs, and gRPC's ConnectionTimeout (-grpc.handshake-timeout)
// closes those anyway.
//
// The listener wraps each accepted connection (gatedConn), and the
// credentials wrap each handshake's result (prefaceConn), which moves its
// connection to established once HTTP/2's 24-byte preface has been read
// through it: bytes a plaintext client has to send, or a TLS client has
// sent inside its finished handshake.
type connGate struct {
	maxConns int
	metrics  *transportMetrics
	epoch    time.Time // the clock of gatedConn.idleSince, monotonic

	mu          sync.Mutex
	handshaking list.List             // *gatedConn, oldest first
	established map[string]*gatedConn // by remote address, as gRPC's peer has it
}

// newConnGate returns a gate for maxConns established connections.
func newConnGate(maxConns int, m *transportMetrics) *connGate {
	return &connGate{maxConns: maxConns, metrics: m, epoch: time.Now(), established: make(map[string]*gatedConn, min(maxConns, 1024))}
}

// now is the gate's clock.
func (g *connGate) now() int64 { return int64(time.Since(g.epoch)) }

// errConnLimit refuses a connection that finished its handshake while
// -grpc.max-connections were established.
var errConnLimit = errors.New("pusher: -grpc.max-connections connections are open")

// listen wraps lis so that its connections go through the gate.
func (g *connGate) listen(lis net.Listener) net.Listener { return gatedListener{lis, g} }

// credentials wraps creds so that a connection counts as established once
// its handshake is done and its preface read.
func (g *connGate) credentials(creds credentials.TransportCredentials) credentials.TransportCredentials {
	return gatedCredentials{creds}
}

// accepted records c as in its handshake, evicting the oldest connection
// in its handshake when there are too many.
func (g *connGate) accepted(c net.Conn) *gatedConn {
	gc := &gatedConn{Conn: c, gate: g}
	g.mu.Lock()
	gc.elem = g.handshaking.PushBack(gc)
	g.metrics.handshaking.Inc()
	var evicted *gatedConn
	if g.handshaking.Len() > g.maxConns {
		evicted = g.handshaking.Front().Value.(*gatedConn)
		g.forget(evicted)
	}
	g.mu.Unlock()
	if evicted != nil {
		g.metrics.evictedHandshakes.Inc()
		_ = evicted.Conn.Close()
	}
	return gc
}

// establish moves gc from its handshake to the established connections,
// making room or refusing it when they are full.
func (g *connGate) establish(gc *gatedConn) error {
	now := g.now()
	g.mu.Lock()
	if gc.elem == nil {
		g.mu.Unlock()
		return net.ErrClosed // evicted meanwhile
	}
	g.handshaking.Remove(gc.elem)
	gc.elem = nil
	g.metrics.handshaking.Dec()
	var idle *gatedConn
	if len(g.established) >= g.maxConns {
		if idle = g.idlest(now); idle == nil {
			g.mu.Unlock()
			g.metrics.refusedConnections.Inc()
			return errConnLimit
		}
		g.forget(idle)
	}
	gc.key, gc.idleSince = gc.RemoteAddr().String(), now
	g.established[gc.key] = gc
	g.mu.Unlock()
	g.metrics.established.Inc()
	if idle != nil {
		g.metrics.idleConnections.Inc()
		_ = idle.Conn.Close()
	}
	return nil
}

// idlest returns the established connection longest without a call, if
// that is longer than staleAfter; g.mu is held.
func (g *connGate) idlest(now int64) *gatedConn {
	var oldest *gatedConn
	for _, c := range g.established {
		if c.streams == 0 && (oldest == nil || c.idleSince < oldest.idleSince) {
			oldest = c
		}
	}
	if oldest == nil || now-oldest.idleSince < int64(staleAfter) {
		return nil
	}
	return oldest
}

// forget takes gc out of whichever class it is in; g.mu is held.
func (g *connGate) forget(gc *gatedConn) {
	if gc.elem != nil {
		g.handshaking.Remove(gc.elem)
		gc.elem = nil
		g.metrics.handshaking.Dec()
	}
	if gc.key != "" && g.established[gc.key] == gc {
		delete(g.established, gc.key)
		g.metrics.established.Dec()
	}
	gc.key = ""
}

// streamOpened counts a call on the connection of ctx and returns that
// connection, or nil when it is not one of the gate's.
func (g *connGate) streamOpened(ctx context.Context) *gatedConn {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	gc := g.established[p.Addr.String()]
	if gc != nil {
		gc.streams++
	}
	return gc
}

// streamClosed counts the end of a call that streamOpened counted.
func (g *connGate) streamClosed(gc *gatedConn) {
	if gc == nil {
		return
	}
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if gc.streams--; gc.streams == 0 {
		gc.idleSince = now
	}
}

// counts returns the connections in their handshake and established.
func (g *connGate) counts() (handshaking, established int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.handshaking.Len(), len(g.established)
}

// gatedListener is a listener whose connections go through a connGate.
type gatedListener struct {
	net.Listener
	gate *connGate
}

// Accept accepts a connection and records it as in its handshake.
func (l gatedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.gate.accepted(c), nil
}

// gatedConn is an accepted connection; its fields are the gate's, under
// its lock.
type gatedConn struct {
	net.Conn
	gate *connGate
	elem *list.Element // in gate.handshaking, or nil
	key  string        // in gate.established under it, or ""
	// streams are the calls open on the connection; idleSince is when
	// they last became none, on the gate's clock.
	streams   int
	idleSince int64
}

// Close gives the connection's place back and closes it.
func (c *gatedConn) Close() error {
	c.gate.mu.Lock()
	c.gate.forget(c)
	c.gate.mu.Unlock()
	return c.Conn.Close()
}

// gatedCredentials are a server's credentials whose handshakes end in a
// prefaceConn.
type gatedCredentials struct {
	credentials.TransportCredentials
}

// ServerHandshake does the handshake and wraps its connection so that the
// preface read through it establishes the connection.
func (c gatedCredentials) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	gc, ok := raw.(*gatedConn)
	if !ok {
		return conn, info, nil
	}
	return &prefaceConn{Conn: conn, gc: gc}, info, nil
}

// Clone returns a copy.
func (c gatedCredentials) Clone() credentials.TransportCredentials {
	return gatedCredentials{c.TransportCredentials.Clone()}
}

// prefaceConn is a connection after its handshake; once the client's
// preface has been read through it the connection is established. gRPC
// reads a connection from one goroutine at a time.
type prefaceConn struct {
	net.Conn
	gc          *gatedConn
	read        int
	established bool
}

// Read reads, and establishes the connection once the preface is read,
// failing the read when the gate refuses it.
func (c *prefaceConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.established {
		return n, err
	}
	if c.read += n; c.read >= len(http2.ClientPreface) {
		c.established = true
		if gerr := c.gc.gate.establish(c.gc); gerr != nil {
			return 0, gerr
		}
	}
	return n, err
}
