package pusher

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

// pipeConn returns the server end of a connection, and its client end
// closed when the test ends.
func pipeConn(t *testing.T) (server, client net.Conn) {
	t.Helper()
	server, client = net.Pipe()
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	return server, client
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
	g := &connGate{maxConns: 2, metrics: newTransportMetrics(promauto.With(nil))}
	oldest, oldestClient := pipeConn(t)
	g.accepted(oldest)
	second, _ := pipeConn(t)
	g.accepted(second)
	third, _ := pipeConn(t)
	g.accepted(third)

	if h, e := g.counts(); h != 2 || e != 0 {
		t.Fatalf("in handshake %d, established %d; want 2 and 0", h, e)
	}
	_ = oldestClient.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := oldestClient.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("the oldest connection reads %v, want it closed", err)
	}
}

func TestAConnectionCountsOnceItsPrefaceIsRead(t *testing.T) {
	g := &connGate{maxConns: 2, metrics: newTransportMetrics(promauto.With(nil))}
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
	g := &connGate{maxConns: 1, metrics: newTransportMetrics(promauto.With(nil))}
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

func TestACallBeyondTheOpenStreamsIsRefusedAndItsSlotComesBack(t *testing.T) {
	cfg := testConfig(t, "-grpc.max-open-streams", "1")
	h := startServer(t, cfg, &stubBackend{})
	health := healthpb.NewHealthClient(h.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	watchCtx, stopWatch := context.WithCancel(ctx)
	watch, err := health.Watch(watchCtx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	_, err = health.Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a call beside the one open stream: %v, want RESOURCE_EXHAUSTED", err)
	}
	stopWatch()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot did not come back after the stream ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAStreamWithoutAMessageForASecondGivesItsPlaceToANewCall(t *testing.T) {
	cfg := testConfig(t, "-grpc.max-open-streams", "1")
	h := startServer(t, cfg, &stubBackend{})
	health := healthpb.NewHealthClient(h.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	watch, err := health.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(staleAfter + 100*time.Millisecond)
	if _, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a call beside a stream idle for %s: %v, want it served", staleAfter, err)
	}
	if _, err := watch.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("the idle stream ends with %v, want CANCELLED", err)
	}
}

func TestAStreamThatDeliversKeepsItsPlace(t *testing.T) {
	cfg := testConfig(t, "-grpc.max-open-streams", "1")
	h := startServer(t, cfg, &stubBackend{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := h.client.Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if err := stream.Send(pushRequest(uint64(i+1), "t1", 1)); err != nil {
			t.Fatal(err)
		}
		if resp := recv(t, stream); resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
			t.Fatalf("request %d answered %s", i+1, resp.Status)
		}
		_, err := healthpb.NewHealthClient(h.conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("a call beside a stream that delivered %s ago: %v, want RESOURCE_EXHAUSTED", 250*time.Millisecond, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
