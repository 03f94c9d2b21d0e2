package pusher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"strings"
	"testing"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ferrylabs/ferry/proto/codec"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

// TestGRPCMetricsAsTheProvider: the server's gRPC metrics are the series
// go-grpc-middleware's Prometheus provider keeps, with the same values,
// for unary calls that succeed and fail, a stream's messages, and every
// method's series from zero. Both count the same calls on one server.
func TestGRPCMetricsAsTheProvider(t *testing.T) {
	checkGoroutines(t)
	ours, ref := newGRPCMetrics(), grpcprom.NewServerMetrics(
		grpcprom.WithServerCounterOptions(grpcprom.WithNamespace("ferry_pusher")),
		grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramNamespace("ferry_pusher")),
	)
	oursReg, refReg := prometheus.NewRegistry(), prometheus.NewRegistry()
	oursReg.MustRegister(ours)
	refReg.MustRegister(ref)

	b := &stubBackend{sync: func(context.Context) (int, error) { return 0, errors.New("fsync: input/output error") }}
	srv := NewServer(testConfig(t), b, slog.New(slog.DiscardHandler), nil)
	g := grpc.NewServer(codec.ServerOption(),
		grpc.ChainUnaryInterceptor(ours.unary(), ref.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(ours.stream(), ref.StreamServerInterceptor()))
	srv.Register(g)
	healthpb.RegisterHealthServer(g, health.NewServer())
	ours.initialize(g)
	ref.InitializeMetrics(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	defer func() {
		g.Stop()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), codec.DialOption())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	client := ferryv1.NewPusherServiceClient(conn)
	ctx := testContext(t)

	for i := range 3 {
		if _, err := client.PushOne(ctx, pushRequest(uint64(i), "t1", 1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.Sync(ctx, &ferryv1.SyncRequest{}); err == nil {
		t.Fatal("Sync succeeded, want Unavailable")
	}
	stream, err := client.Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := stream.Send(pushRequest(uint64(i), "t1", 1)); err != nil {
			t.Fatal(err)
		}
		recv(t, stream)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("Recv after CloseSend = %v, want EOF", err)
	}
	// The server counts a stream's end after the client saw it: wait for
	// both to count it, then compare everything.
	pushHandled := func(reg *prometheus.Registry) bool {
		return strings.Contains(strings.Join(dump(t, reg), "\n"), `grpc_server_handled_total{grpc_code="OK",grpc_method="Push",grpc_service="ferry.v1.PusherService",grpc_type="bidi_stream"} 1`)
	}
	waitFor(ctx, t, "the stream's end to be counted", func() bool { return pushHandled(oursReg) && pushHandled(refReg) })

	got, want := dump(t, oursReg), dump(t, refReg)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("series differ from the provider's\nours:\n%s\n\nprovider's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(want) < 100 {
		t.Errorf("only %d series: the methods are not reported from zero", len(want))
	}
}

// dump lists every series of reg with its value (a histogram's count), one
// line each, sorted.
func dump(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			var v float64
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				v = m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				v = float64(m.GetHistogram().GetSampleCount())
			default:
				t.Fatalf("%s: unexpected type %s", mf.GetName(), mf.GetType())
			}
			out = append(out, fmt.Sprintf("%s{%s} %g", strings.TrimPrefix(mf.GetName(), "ferry_pusher_"), strings.Join(labels, ","), v))
		}
	}
	sort.Strings(out)
	return out
}

// TestGRPCMetricsAllocateNothingPerCall: counting a call of a registered
// method finds its series without building label values (the provider
// allocates twice per call, and hashes label values five times).
func TestGRPCMetricsAllocateNothingPerCall(t *testing.T) {
	m := newGRPCMetrics()
	g := grpc.NewServer()
	NewServer(testConfig(t), &stubBackend{}, slog.New(slog.DiscardHandler), nil).Register(g)
	m.initialize(g)
	intercept := m.unary()
	info := &grpc.UnaryServerInfo{FullMethod: "/" + serviceName + "/PushOne"}
	ctx := context.Background()
	var resp any = &struct{}{}
	handler := func(context.Context, any) (any, error) { return resp, nil }
	if n := testing.AllocsPerRun(100, func() { _, _ = intercept(ctx, resp, info, handler) }); n != 0 {
		t.Errorf("%.0f allocations per call, want 0", n)
	}
}
