package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	pusherapp "github.com/ferrylabs/ferry/pusher/app"
)

// TestReflectionWorksLikeGrpcurl asks the pusher that pusher/app starts
// what `grpcurl -plaintext <addr> list` asks: the services listed by server
// reflection v1. (The pusher package tests describe and calls through
// reflection in depth.)
func TestReflectionWorksLikeGrpcurl(t *testing.T) {
	t.Parallel()
	cfg := pusherConfig(t, t.TempDir())
	cfg.Backend = pusherapp.BackendDiscard
	p := startPusher(t, cfg)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	stream, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatalf("ServerReflectionInfo: %v", err)
	}
	if err := stream.Send(&rpb.ServerReflectionRequest{
		MessageRequest: &rpb.ServerReflectionRequest_ListServices{ListServices: "*"},
	}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	_ = stream.CloseSend()
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"ferry.v1.PusherService", "grpc.health.v1.Health"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, want it to include %s", names, want)
		}
	}
	t.Logf("reflection v1 on %s lists %v", p.GRPCAddr(), names)
}
