package pusher

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ferrylabs/ferry/proto/codec"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// TestPushOneRefusalsAndGRPCCallsAreCounted: a PushOne refused at the
// in-flight limit is counted in ferry_pusher_requests_total like a
// stream's refusal, and every call shows up in the gRPC server metrics.
func TestPushOneRefusalsAndGRPCCallsAreCounted(t *testing.T) {
	checkGoroutines(t)
	started := make(chan string, 10)
	release := make(chan struct{})
	cfg := testConfig(t, "-pusher.max-inflight-requests", "1")
	reg := prometheus.NewRegistry()
	logger := slog.New(slog.DiscardHandler)
	srv := NewServer(cfg, blockingBackend(started, release), logger, reg)
	svc, err := Listen(cfg, srv, logger)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	conn, err := grpc.NewClient(svc.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()), codec.DialOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	client := ferryv1.NewPusherServiceClient(conn)
	ctx := testContext(t)

	firstDone := make(chan error, 1)
	go func() {
		_, err := client.PushOne(ctx, pushRequest(1, "t1", 1))
		firstDone <- err
	}()
	await(ctx, t, "the first request to reach the backend", started)
	resp, err := client.PushOne(ctx, pushRequest(2, "t2", 1))
	if err != nil || resp.Status != ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR {
		t.Fatalf("PushOne at the limit: %v %v, want SERVER_ERROR", resp, err)
	}
	if got := testutil.ToFloat64(srv.metrics.requests.WithLabelValues("server_error")); got != 1 {
		t.Errorf("ferry_pusher_requests_total{status=server_error} = %v, want 1", got)
	}
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(srv.metrics.requests.WithLabelValues("ok")); got != 1 {
		t.Errorf("ferry_pusher_requests_total{status=ok} = %v, want 1", got)
	}
	n, err := testutil.GatherAndCount(reg, "ferry_pusher_grpc_server_handled_total")
	if err != nil || n == 0 {
		t.Fatalf("ferry_pusher_grpc_server_handled_total: %d series, %v", n, err)
	}
	var calls float64
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "ferry_pusher_grpc_server_handled_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "grpc_method" && l.GetValue() == "PushOne" {
					calls += m.GetCounter().GetValue()
				}
			}
		}
	}
	if calls != 2 {
		t.Errorf("PushOne calls handled: %v, want 2", calls)
	}
}

func TestReadyFailsOnceDraining(t *testing.T) {
	t.Parallel()
	srv := NewServer(testConfig(t), &stubBackend{}, slog.New(slog.DiscardHandler), nil)
	if err := srv.Ready(); err != nil {
		t.Fatalf("Ready() = %v before draining, want nil", err)
	}
	if err := srv.Drain(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Ready(); !errors.Is(err, backend.ErrShuttingDown) {
		t.Errorf("Ready() = %v while draining, want ErrShuttingDown", err)
	}
}
