package pusher

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ferrylabs/ferry/internal/benchfixture"
	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/proto/codec"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// benchConfig is the pusher's default configuration on a free loopback port.
func benchConfig(b *testing.B) Config {
	b.Helper()
	var cfg Config
	fs := flag.NewFlagSet("pusher", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"-grpc.listen-address=127.0.0.1:0", "-shutdown-timeout=5s"}); err != nil {
		b.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	return cfg
}

// benchRequest is a request of the bench harness's shapes: series series
// of tenant-1 with one recent sample each.
func benchRequest(series int) *ferryv1.PushRequest {
	sh := loadgen.Shape{Series: series, StartMs: time.Now().Add(-time.Hour).UnixMilli(), StepMs: 1}
	return &ferryv1.PushRequest{RequestId: 1, Tenant: "tenant-1", Topic: "ingest", WriteRequest: *sh.Request("tenant-1", 1)}
}

// BenchmarkApply measures the pusher's apply path without the network:
// counting, the size check, validation (Limits.Filter), the discard backend,
// the answer and its metrics.
func BenchmarkApply(b *testing.B) {
	for _, series := range []int{10, 100} {
		b.Run(fmt.Sprintf("series=%d", series), func(b *testing.B) {
			s := NewServer(benchConfig(b), backend.NewDiscard(), slog.New(slog.DiscardHandler), prometheus.NewRegistry())
			req := benchRequest(series)
			size := req.WriteRequest.Size() // a stream knows it from the bytes received
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if resp := s.applier.apply(ctx, req, size, nil); resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
					b.Fatalf("%s: %s", resp.Status, resp.Reason)
				}
			}
			b.ReportMetric(float64(series)*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}

// BenchmarkPushStream measures requests through a real gRPC Push stream on
// loopback into the discard backend: marshal, transport, unmarshal, apply,
// answer. inflight=1 is stop-and-wait, what one tenant's lane does in the
// consumer with -consumer.max-inflight-per-tenant=1; inflight=64 is many
// tenants sharing the stream, unsequenced. sequenced/inflight=16 is one
// tenant as the consumer sends it by default: sequenced requests, which the
// pusher applies one at a time in order.
func BenchmarkPushStream(b *testing.B) {
	for _, series := range []int{10, 100} {
		for _, inflight := range []int{1, 64} {
			b.Run(fmt.Sprintf("series=%d/inflight=%d", series, inflight), func(b *testing.B) {
				benchPushStream(b, series, inflight, false)
			})
		}
		b.Run(fmt.Sprintf("series=%d/sequenced/inflight=16", series), func(b *testing.B) {
			benchPushStream(b, series, 16, true)
		})
	}
	// The bench's many-tenants shape: each request of another tenant than
	// the one before, so a tenant's queue is mostly empty and its goroutine
	// idle between requests.
	b.Run("series=10/sequenced/tenants=1000/inflight=64", func(b *testing.B) {
		benchPushStreamTenants(b, 10, 64, 1000)
	})
}

// benchClient serves a pusher with the discard backend on loopback, built
// as the process builds it (Listen: its interceptors and options), and
// returns a client of it; the server stops when the benchmark ends. The
// logger is at info level, the process's default, but writes nowhere.
func benchClient(b *testing.B) ferryv1.PusherServiceClient {
	b.Helper()
	cfg := benchConfig(b)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := NewServer(cfg, backend.NewDiscard(), logger, prometheus.NewRegistry())
	svc, err := Listen(cfg, srv, logger)
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- svc.Run(runCtx) }()
	conn, err := grpc.NewClient(svc.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()), codec.DialOption())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = conn.Close()
		stopRun()
		if err := <-runDone; err != nil {
			b.Error(err)
		}
	})
	return ferryv1.NewPusherServiceClient(conn)
}

// BenchmarkPushOne measures unary PushOne calls on loopback into the
// discard backend, one at a time as a simple client makes them (the bench's
// simple loop), at the sizes BenchmarkPushStream uses and a big record: the
// per-call cost of gRPC's unary path and the server's interceptors, which a
// stream pays once.
func BenchmarkPushOne(b *testing.B) {
	for _, series := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("series=%d", series), func(b *testing.B) {
			client := benchClient(b)
			req := benchRequest(series)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.PushOne(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				if resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
					b.Fatalf("%s: %s", resp.Status, resp.Reason)
				}
			}
			b.ReportMetric(float64(series)*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}

func benchPushStream(b *testing.B, series, inflight int, sequenced bool) {
	tenants := 0 // unsequenced: the request's own tenant throughout
	if sequenced {
		tenants = 1
	}
	benchPushStreamTenants(b, series, inflight, tenants)
}

// benchPushStreamTenants is benchPushStream with the requests sequenced and
// spread round-robin over tenants, or unsequenced when tenants is 0. It
// also reports the process's CPU time per request (client and server).
func benchPushStreamTenants(b *testing.B, series, inflight, tenants int) {
	sequenced := tenants > 0
	names := make([]string, tenants)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%d", i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := benchClient(b).Push(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		b.Fatal(err)
	}
	req := benchRequest(series)

	// The receiver frees a slot per answer; the loop sends while there is
	// one, so at most inflight requests are outstanding.
	slots := make(chan struct{}, inflight)
	recvErr := make(chan error, 1)
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			if resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
				recvErr <- fmt.Errorf("%s: %s", resp.Status, resp.Reason)
				return
			}
			<-slots
		}
	}()
	b.ReportAllocs()
	start := benchfixture.CPUTime(b)
	var id uint64
	for b.Loop() {
		select {
		case slots <- struct{}{}:
		case err := <-recvErr:
			b.Fatal(err)
		}
		id++
		req.RequestId = id
		if sequenced {
			req.Sequence = id
			req.Tenant = names[id%uint64(tenants)]
		}
		if err := stream.Send(req); err != nil {
			b.Fatal(err)
		}
	}
	// Wait for the answers still outstanding (untimed: b.Loop has stopped
	// the timer; they are at most inflight of b.N).
	for range inflight {
		select {
		case slots <- struct{}{}:
		case err := <-recvErr:
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(series)*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
	benchfixture.ReportCPU(b, start)
	_ = stream.CloseSend()
}
