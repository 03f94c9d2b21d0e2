package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ferrylabs/ferry/proto/codec"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// startPusher runs a whole pusher process, TSDB backend included, on
// loopback ports until the test ends.
// testConfig is the default configuration on loopback ports with its
// storage at path.
func testConfig(path string) Config {
	var cfg Config
	cfg.RegisterFlags(flag.NewFlagSet("", flag.PanicOnError))
	cfg.Pusher.GRPCListenAddress = "127.0.0.1:0"
	cfg.HTTPListenAddress = "127.0.0.1:0"
	cfg.TSDB.Path = path
	return cfg
}

func startPusher(t *testing.T, mutate func(*Config)) *Process {
	t.Helper()
	cfg := testConfig(t.TempDir())
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	p, err := Start(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("pusher run: %v", err)
		}
	})
	return p
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), codec.DialOption(),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func series(ts int64, v float64, labels ...string) prompb.TimeSeries {
	s := prompb.TimeSeries{Samples: []prompb.Sample{{Value: v, Timestamp: ts}}}
	for i := 0; i+1 < len(labels); i += 2 {
		s.Labels = append(s.Labels, prompb.Label{Name: labels[i], Value: labels[i+1]})
	}
	return s
}

// rawMessage sends bytes as they are, for requests a well-behaved client
// could not build.
type rawMessage []byte

func (r rawMessage) Size() int                                  { return len(r) }
func (r rawMessage) MarshalToSizedBuffer(b []byte) (int, error) { return copy(b, r), nil }
func (r *rawMessage) Unmarshal(b []byte) error                  { *r = append((*r)[:0], b...); return nil }

func TestHostileRequestsGetAClassifiedAnswerAndThePusherStaysHealthy(t *testing.T) {
	p := startPusher(t, func(c *Config) { c.Pusher.MaxRequestBytes = 1 << 20 })
	conn := dial(t, p.GRPCAddr())
	client := ferryv1.NewPusherServiceClient(conn)
	now := time.Now().UnixMilli()
	up := func(ts ...prompb.TimeSeries) prompb.WriteRequest { return prompb.WriteRequest{Timeseries: ts} }

	manyLabels := []string{"__name__", "wide"}
	for i := range 10_000 {
		manyLabels = append(manyLabels, "l"+strconv.Itoa(i), "v")
	}
	hist := prompb.TimeSeries{
		Labels:     []prompb.Label{{Name: "__name__", Value: "h"}},
		Histograms: []prompb.Histogram{{Count: &prompb.Histogram_CountInt{CountInt: 1}, Schema: 3, Timestamp: now, PositiveSpans: []prompb.BucketSpan{{Offset: 0, Length: 2}}, PositiveDeltas: []int64{5, -10}}},
	}
	for _, tc := range []struct {
		name   string
		req    *ferryv1.PushRequest
		status ferryv1.AckStatus
		reason string
	}{
		{"a label value just under its limit is OK", &ferryv1.PushRequest{Tenant: "t", WriteRequest: up(series(now, 1, "__name__", "big", "pad", strings.Repeat("x", 2000)))},
			ferryv1.AckStatus_ACK_STATUS_OK, ""},
		{"an empty tenant is a client error", &ferryv1.PushRequest{WriteRequest: up(series(now, 1, "__name__", "up"))},
			ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR, "empty tenant"},
		{"a tenant that is a path is a client error", &ferryv1.PushRequest{Tenant: "../../etc", WriteRequest: up(series(now, 1, "__name__", "up"))},
			ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR, "tenant"},
		{"10,000 labels are a client error", &ferryv1.PushRequest{Tenant: "t", WriteRequest: up(series(now, 1, manyLabels...))},
			ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR, "labels"},
		{"invalid UTF-8 is a client error", &ferryv1.PushRequest{Tenant: "t", WriteRequest: up(series(now, 1, "__name__", "up", "job", "\xff\xfe"))},
			ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR, "UTF-8"},
		{"NaN and infinities are valid samples", &ferryv1.PushRequest{Tenant: "t", WriteRequest: up(
			series(now, math.NaN(), "__name__", "nan"), series(now, math.Inf(1), "__name__", "pinf"), series(now, math.Inf(-1), "__name__", "ninf"))},
			ferryv1.AckStatus_ACK_STATUS_OK, ""},
		{"a timestamp far in the future is a client error", &ferryv1.PushRequest{Tenant: "t", WriteRequest: up(series(now+365*24*3600*1000, 1, "__name__", "future"))},
			ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR, "future"},
		{"a timestamp before 1970 is a client error", &ferryv1.PushRequest{Tenant: "t", WriteRequest: up(series(-1000, 1, "__name__", "past"))},
			ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR, "1970"},
		{"a request without series is OK", &ferryv1.PushRequest{Tenant: "t"},
			ferryv1.AckStatus_ACK_STATUS_OK, ""},
		{"a series without samples is OK", &ferryv1.PushRequest{Tenant: "t", WriteRequest: up(prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: "empty"}}})},
			ferryv1.AckStatus_ACK_STATUS_OK, ""},
		{"an invalid histogram is a client error", &ferryv1.PushRequest{Tenant: "t", WriteRequest: up(hist)},
			ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR, "histogram"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := client.PushOne(ctx, tc.req)
			if err != nil {
				t.Fatalf("PushOne: %v", err)
			}
			if resp.Status != tc.status || !strings.Contains(resp.Reason, tc.reason) {
				t.Fatalf("answer %s %q, want %s with a reason containing %q", resp.Status, resp.Reason, tc.status, tc.reason)
			}
		})
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t.Run("a request over the size limit is a client error", func(t *testing.T) {
		req := &ferryv1.PushRequest{Tenant: "t", WriteRequest: up(series(now, 1, "__name__", "big", "pad", strings.Repeat("x", 2<<20)))}
		resp, err := client.PushOne(ctx, req)
		if err != nil || resp.Status != ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR || !strings.Contains(resp.Reason, "larger than the limit") {
			t.Fatalf("answer %v, %v; want CLIENT_ERROR naming the limit", resp, err)
		}
	})
	t.Run("a request over the transport limit is refused with ResourceExhausted", func(t *testing.T) {
		req := &ferryv1.PushRequest{Tenant: "t", WriteRequest: up(series(now, 1, "__name__", "huge", "pad", strings.Repeat("x", 8<<20)))}
		_, err := client.PushOne(ctx, req)
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("error %v, want ResourceExhausted", err)
		}
	})
	t.Run("unknown fields are ignored", func(t *testing.T) {
		good := &ferryv1.PushRequest{Tenant: "t", WriteRequest: up(series(now, 7, "__name__", "unknown_fields"))}
		raw, err := good.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		msg := rawMessage(append(raw, 0xf8, 0x06, 0x2a)) // field 111, varint 42: from a newer sender
		var resp ferryv1.PushResponse
		if err := conn.Invoke(ctx, "/ferry.v1.PusherService/PushOne", &msg, &resp); err != nil {
			t.Fatalf("PushOne with unknown fields: %v", err)
		}
		if resp.Status != ferryv1.AckStatus_ACK_STATUS_OK || resp.AcceptedSamples != 1 {
			t.Fatalf("answer %s %q accepted=%d, want OK with 1 sample", resp.Status, resp.Reason, resp.AcceptedSamples)
		}
	})
	t.Run("undecodable bytes are refused, and the pusher lives on", func(t *testing.T) {
		var resp ferryv1.PushResponse
		msg := rawMessage{0x32, 0xff, 0xff, 0xff}
		err := conn.Invoke(ctx, "/ferry.v1.PusherService/PushOne", &msg, &resp)
		if status.Code(err) != codes.Internal {
			t.Fatalf("error %v, want Internal (the server cannot parse the request)", err)
		}
	})

	health, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || health.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("after the hostile requests health is %v, %v; want SERVING", health, err)
	}
	resp, err := client.PushOne(ctx, &ferryv1.PushRequest{Tenant: "t", WriteRequest: up(series(now, 1, "__name__", "after"))})
	if err != nil || resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
		t.Fatalf("a good request after the hostile ones: %v, %v", resp, err)
	}
}
