package pusher

import (
	"container/list"
	"errors"
	"net"
	"sync"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/credentials"
)

// connGate bounds the gRPC connections so that connections nobody
// finishes cannot spend the bound. A connection is in one of two classes:
//
//	accepted ──(TLS handshake, then HTTP/2's preface read)──▶ established ──▶ closed
//	    │                                                         ▲
//	    └── evicted (oldest, when handshakes are full) ──▶ closed  │
//	                         refused (established full) ──▶ closed ┘
//
// Established connections are at most maxConns, and one that finishes its
// handshake beyond that is closed at once instead of waiting in accept.
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

	mu          sync.Mutex
	handshaking list.List // *gatedConn, oldest first
	established int
}

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
// or refuses it when they are full.
func (g *connGate) establish(gc *gatedConn) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gc.elem == nil {
		return net.ErrClosed // evicted meanwhile
	}
	g.handshaking.Remove(gc.elem)
	gc.elem = nil
	g.metrics.handshaking.Dec()
	if g.established >= g.maxConns {
		g.metrics.refusedConnections.Inc()
		return errConnLimit
	}
	g.established++
	gc.counted = true
	g.metrics.established.Inc()
	return nil
}

// forget takes gc out of whichever class it is in; g.mu is held.
func (g *connGate) forget(gc *gatedConn) {
	if gc.elem != nil {
		g.handshaking.Remove(gc.elem)
		gc.elem = nil
		g.metrics.handshaking.Dec()
	}
	if gc.counted {
		g.established--
		gc.counted = false
		g.metrics.established.Dec()
	}
}

// counts returns the connections in their handshake and established.
func (g *connGate) counts() (handshaking, established int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.handshaking.Len(), g.established
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
	gate    *connGate
	elem    *list.Element // in gate.handshaking, or nil
	counted bool          // in gate.established
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
