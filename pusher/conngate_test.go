package pusher

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
)

// testConnGate is a gate for maxConns established connections with
// metrics of its own.
func testConnGate(maxConns int) *connGate {
	return newConnGate(maxConns, newTransportMetrics(promauto.With(nil)))
}

// pipeConn returns the server end of a loopback TCP connection, and its
// client end; both are closed when the test ends.
func pipeConn(t *testing.T) (server, client net.Conn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	client, err = net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	return server, client
}

// closedByPeer reports whether the server closed c within a second.
func closedByPeer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

// handshake runs the gate's credentials on c as gRPC does and reads the
// preface the client writes, returning the read's error.
func handshake(t *testing.T, g *connGate, c net.Conn, client net.Conn) error {
	t.Helper()
	conn, _, err := g.credentials(insecure.NewCredentials()).ServerHandshake(c)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = client.Write([]byte(http2.ClientPreface)) }()
	_, err = io.ReadFull(conn, make([]byte, len(http2.ClientPreface)))
	return err
}

func TestANewConnectionEvictsTheOldestStillInItsHandshake(t *testing.T) {
	g := testConnGate(2)
	oldest, oldestClient := pipeConn(t)
	g.accepted(oldest)
	second, _ := pipeConn(t)
	g.accepted(second)
	third, _ := pipeConn(t)
	g.accepted(third)

	if h, e := g.counts(); h != 2 || e != 0 {
		t.Fatalf("in handshake %d, established %d; want 2 and 0", h, e)
	}
	if !closedByPeer(oldestClient) {
		t.Fatal("the oldest connection is still open")
	}
}

func TestAConnectionCountsOnceItsPrefaceIsRead(t *testing.T) {
	g := testConnGate(2)
	c, client := pipeConn(t)
	gc := g.accepted(c)
	if err := handshake(t, g, gc, client); err != nil {
		t.Fatalf("reading the preface: %v", err)
	}
	if h, e := g.counts(); h != 0 || e != 1 {
		t.Fatalf("in handshake %d, established %d; want 0 and 1", h, e)
	}
	_ = gc.Close()
	_ = gc.Close()
	if h, e := g.counts(); h != 0 || e != 0 {
		t.Fatalf("after Close (twice): in handshake %d, established %d; want 0 and 0", h, e)
	}
}

func TestAConnectionBeyondTheLimitIsRefusedOnceItsPrefaceIsRead(t *testing.T) {
	g := testConnGate(1)
	first, firstClient := pipeConn(t)
	if err := handshake(t, g, g.accepted(first), firstClient); err != nil {
		t.Fatal(err)
	}
	second, secondClient := pipeConn(t)
	if err := handshake(t, g, g.accepted(second), secondClient); !errors.Is(err, errConnLimit) {
		t.Fatalf("the second connection's preface reads %v, want %v", err, errConnLimit)
	}
	if h, e := g.counts(); h != 0 || e != 1 {
		t.Fatalf("in handshake %d, established %d; want 0 and 1", h, e)
	}
}

func TestAConnectionWithoutACallForASecondGivesItsPlaceToANewOne(t *testing.T) {
	g := testConnGate(1)
	idle, idleClient := pipeConn(t)
	if err := handshake(t, g, g.accepted(idle), idleClient); err != nil {
		t.Fatal(err)
	}
	busy, busyClient := pipeConn(t)
	if err := handshake(t, g, g.accepted(busy), busyClient); !errors.Is(err, errConnLimit) {
		t.Fatalf("a connection beside one established now: %v, want %v", err, errConnLimit)
	}
	time.Sleep(staleAfter + 100*time.Millisecond)
	busy, busyClient = pipeConn(t)
	gc := g.accepted(busy)
	if err := handshake(t, g, gc, busyClient); err != nil {
		t.Fatalf("a connection beside one idle for %s: %v, want it established", staleAfter, err)
	}
	if !closedByPeer(idleClient) {
		t.Fatal("the idle connection is still open")
	}

	// A connection with a call open keeps its place however long.
	call := g.streamOpened(peer.NewContext(context.Background(), &peer.Peer{Addr: busy.RemoteAddr()}))
	if call != gc {
		t.Fatalf("streamOpened found %v, want the established connection", call)
	}
	time.Sleep(staleAfter + 100*time.Millisecond)
	third, thirdClient := pipeConn(t)
	if err := handshake(t, g, g.accepted(third), thirdClient); !errors.Is(err, errConnLimit) {
		t.Fatalf("a connection beside one with a call open: %v, want %v", err, errConnLimit)
	}
}

func TestAConnectionWithACallOpenKeepsItsPlaceOnTheServer(t *testing.T) {
	cfg := testConfig(t, "-grpc.max-connections", "1")
	h := startServer(t, cfg, &stubBackend{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	watch, err := healthpb.NewHealthClient(h.conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(staleAfter + 100*time.Millisecond)

	other, err := grpc.NewClient(h.svc.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	callCtx, callCancel := context.WithTimeout(ctx, time.Second)
	defer callCancel()
	if _, err := healthpb.NewHealthClient(other).Check(callCtx, &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("a second connection was served beside one with a call open, at -grpc.max-connections=1")
	}
	// The first connection is untouched.
	if _, err := healthpb.NewHealthClient(h.conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("the first connection: %v", err)
	}
}
