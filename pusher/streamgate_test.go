package pusher

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

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

func TestACallWithHeadersOverTheBoundIsRefused(t *testing.T) {
	h := startServer(t, testConfig(t), &stubBackend{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	big := metadata.AppendToOutgoingContext(ctx, "x-padding", strings.Repeat("a", maxHeaderListBytes))
	if _, err := healthpb.NewHealthClient(h.conn).Check(big, &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatalf("a call with %d bytes of headers was served, over the bound of %d", maxHeaderListBytes, maxHeaderListBytes)
	}
	if _, err := healthpb.NewHealthClient(h.conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("a call with small headers after it: %v", err)
	}
}
