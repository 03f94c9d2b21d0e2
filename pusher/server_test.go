package pusher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/proto/codec"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// testTimeout bounds every test context.
const testTimeout = 20 * time.Second

// stubBackend is a Backend made of functions; a nil function accepts
// everything.
type stubBackend struct {
	push func(ctx context.Context, tenant string, req *prompb.WriteRequest) (backend.Result, error)
	sync func(ctx context.Context) (int, error)
}

func (b *stubBackend) Push(ctx context.Context, tenant string, req *prompb.WriteRequest) (backend.Result, error) {
	if b.push == nil {
		return backend.Result{Accepted: backend.Count(req)}, nil
	}
	return b.push(ctx, tenant, req)
}

func (b *stubBackend) Sync(ctx context.Context) (int, error) {
	if b.sync == nil {
		return 0, nil
	}
	return b.sync(ctx)
}

func (b *stubBackend) Close() error { return nil }

// testContext returns a context that ends with the test or after testTimeout.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// checkGoroutines fails the test if it leaves more goroutines running than
// it found, once a grace period for their exit has passed. Call it first, so
// its cleanup runs after the servers' and clients'. Tests that use it must
// not be parallel.
func checkGoroutines(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("goroutines leaked: %d before the test, %d after:\n%s", before, runtime.NumGoroutine(), buf)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// testConfig is a valid configuration listening on a free loopback port,
// changed by flags args.
func testConfig(t *testing.T, args ...string) Config {
	t.Helper()
	cfg := parseConfig(t, append([]string{"-grpc.listen-address", "127.0.0.1:0", "-shutdown-timeout", "10s"}, args...)...)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// harness is a pusher serving on loopback and a client connected to it.
type harness struct {
	srv    *Server
	svc    *Service
	conn   *grpc.ClientConn
	client ferryv1.PusherServiceClient

	cancelRun context.CancelFunc
	runDone   chan error
	stopOnce  sync.Once
	stopErr   error
}

// startServer serves backend with cfg until the test ends.
func startServer(t *testing.T, cfg Config, backend backend.Backend) *harness {
	t.Helper()
	return serve(t, cfg, NewServer(cfg, backend, slog.New(slog.DiscardHandler), prometheus.NewRegistry()))
}

// serve serves srv, made with cfg, until the test ends.
func serve(t *testing.T, cfg Config, srv *Server) *harness {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	svc, err := Listen(cfg, srv, logger)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{srv: srv, svc: svc, cancelRun: cancel, runDone: make(chan error, 1)}
	go func() { h.runDone <- svc.Run(ctx) }()
	conn, err := grpc.NewClient(svc.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()), codec.DialOption())
	if err != nil {
		cancel()
		t.Fatalf("grpc.NewClient: %v", err)
	}
	h.conn = conn
	h.client = ferryv1.NewPusherServiceClient(conn)
	t.Cleanup(func() {
		if err := conn.Close(); err != nil {
			t.Errorf("close client: %v", err)
		}
		if err := h.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return h
}

// stop cancels Run's context and returns what Run returned. It may be
// called more than once.
func (h *harness) stop() error {
	h.stopOnce.Do(func() {
		h.cancelRun()
		select {
		case h.stopErr = <-h.runDone:
		case <-time.After(testTimeout):
			h.stopErr = errors.New("Run did not return after its context was cancelled")
		}
	})
	return h.stopErr
}

// pushRequest returns request id of tenant with a series per sample.
func pushRequest(id uint64, tenant string, samples int) *ferryv1.PushRequest {
	sh := loadgen.Shape{Series: samples, StartMs: time.Now().Add(-time.Hour).UnixMilli(), StepMs: 1000}
	return &ferryv1.PushRequest{
		RequestId:    id,
		Tenant:       tenant,
		Topic:        "ingest",
		Partition:    1,
		Offset:       int64(id),
		WriteRequest: *sh.Request(tenant, int(id)),
	}
}

// recv receives one response or fails the test.
func recv(t *testing.T, stream ferryv1.PusherService_PushClient) *ferryv1.PushResponse {
	t.Helper()
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	return resp
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// await waits for a value on c or fails the test.
func await[T any](ctx context.Context, t *testing.T, what string, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-ctx.Done():
		t.Fatalf("waiting for %s: %v", what, ctx.Err())
		panic("unreachable")
	}
}

func TestPushAnswersEveryRequestOnce(t *testing.T) {
	checkGoroutines(t)
	const tenants, perTenant = 5, 40
	var mu sync.Mutex
	seen := map[string]int{}
	b := &stubBackend{push: func(_ context.Context, tenant string, req *prompb.WriteRequest) (backend.Result, error) {
		mu.Lock()
		seen[tenant]++
		mu.Unlock()
		return backend.Result{Accepted: backend.Count(req)}, nil
	}}
	h := startServer(t, testConfig(t), b)
	ctx := testContext(t)
	stream, err := h.client.Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sent := map[uint64]*ferryv1.PushRequest{}
	var reqs []*ferryv1.PushRequest
	for i := range tenants * perTenant {
		id := uint64(1000 + i)
		req := pushRequest(id, loadgen.Tenant(i%tenants), 1+i%3)
		sent[id] = req
		reqs = append(reqs, req)
	}
	sendErr := make(chan error, 1)
	go func() {
		for _, req := range reqs {
			if err := stream.Send(req); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- stream.CloseSend()
	}()
	answered := map[uint64]int{}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Recv after %d answers: %v", len(answered), err)
		}
		answered[resp.RequestId]++
		req, ok := sent[resp.RequestId]
		switch {
		case !ok:
			t.Errorf("answer for request %d, which was never sent", resp.RequestId)
		case resp.Status != ferryv1.AckStatus_ACK_STATUS_OK:
			t.Errorf("request %d: %s %q, want OK", resp.RequestId, resp.Status, resp.Reason)
		case resp.AcceptedSamples != backend.Count(&req.WriteRequest) || resp.RejectedSamples != 0:
			t.Errorf("request %d: %d accepted, %d rejected; want %d, 0",
				resp.RequestId, resp.AcceptedSamples, resp.RejectedSamples, backend.Count(&req.WriteRequest))
		}
	}
	if err := await(ctx, t, "the sender", sendErr); err != nil {
		t.Fatalf("Send: %v", err)
	}
	for id := range sent {
		if answered[id] != 1 {
			t.Errorf("request %d answered %d times, want once", id, answered[id])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range tenants {
		if n := seen[loadgen.Tenant(i)]; n != perTenant {
			t.Errorf("backend got %d requests of %s, want %d", n, loadgen.Tenant(i), perTenant)
		}
	}
}

// pushVia sends one request by stream or by PushOne and returns its answer.
func pushVia(ctx context.Context, t *testing.T, client ferryv1.PusherServiceClient, unary bool, req *ferryv1.PushRequest) *ferryv1.PushResponse {
	t.Helper()
	if unary {
		resp, err := client.PushOne(ctx, req)
		if err != nil {
			t.Fatalf("PushOne: %v", err)
		}
		return resp
	}
	stream, err := client.Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(req); err != nil {
		t.Fatalf("Send: %v", err)
	}
	resp := recv(t, stream)
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("Recv after the answer = %v, want EOF", err)
	}
	return resp
}

func TestPushAcknowledgements(t *testing.T) {
	badSeries := func(req *ferryv1.PushRequest) *ferryv1.PushRequest {
		req.WriteRequest.Timeseries = append(req.WriteRequest.Timeseries, prompb.TimeSeries{
			Labels:  labels("__name__", "bad\xffname"),
			Samples: []prompb.Sample{{Value: 1, Timestamp: 1}, {Value: 2, Timestamp: 2}},
		})
		return req
	}
	for _, tc := range []struct {
		name    string
		push    func(ctx context.Context, tenant string, req *prompb.WriteRequest) (backend.Result, error)
		req     *ferryv1.PushRequest
		status  ferryv1.AckStatus
		reason  []string
		retryMs int64 // -1: any positive value
		accept  int64
		reject  int64
		// called says whether the backend must see the request.
		called bool
	}{
		{
			name:   "should answer OK when the backend applies everything",
			req:    pushRequest(1, "t1", 3),
			status: ferryv1.AckStatus_ACK_STATUS_OK,
			accept: 3,
			called: true,
		},
		{
			name: "should answer CLIENT_ERROR with the counts when the backend refuses part of it",
			push: func(context.Context, string, *prompb.WriteRequest) (backend.Result, error) {
				return backend.Result{Accepted: 2, Rejected: 1}, backend.NewClientError("out of order sample")
			},
			req:    pushRequest(2, "t1", 3),
			status: ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR,
			reason: []string{"out of order sample", "(2 accepted, 1 rejected)"},
			accept: 2,
			reject: 1,
			called: true,
		},
		{
			name: "should answer CLIENT_ERROR for a wrapped client error",
			push: func(context.Context, string, *prompb.WriteRequest) (backend.Result, error) {
				return backend.Result{Rejected: 3}, fmt.Errorf("tsdb: %w", backend.NewClientError("series limit of tenant t1"))
			},
			req:    pushRequest(3, "t1", 3),
			status: ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR,
			reason: []string{"series limit of tenant t1", "(0 accepted, 3 rejected)"},
			reject: 3,
			called: true,
		},
		{
			name: "should answer SERVER_ERROR with a retry-after when the backend fails",
			push: func(context.Context, string, *prompb.WriteRequest) (backend.Result, error) {
				return backend.Result{Accepted: 1}, errors.New("disk full")
			},
			req:     pushRequest(4, "t1", 3),
			status:  ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR,
			reason:  []string{"disk full"},
			retryMs: -1,
			called:  true,
		},
		{
			name: "should pass on the backend's retry-after hint",
			push: func(context.Context, string, *prompb.WriteRequest) (backend.Result, error) {
				return backend.Result{}, &backend.ServerError{Reason: "head compaction", RetryAfter: 3 * time.Second}
			},
			req:     pushRequest(5, "t1", 3),
			status:  ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR,
			reason:  []string{"head compaction"},
			retryMs: 3000,
			called:  true,
		},
		{
			name:   "should answer CLIENT_ERROR for an empty tenant without calling the backend",
			req:    pushRequest(6, "", 2),
			status: ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR,
			reason: []string{"empty tenant", "(0 accepted, 2 rejected)"},
			reject: 2,
		},
		{
			name:   "should apply the valid series and answer CLIENT_ERROR for the invalid ones",
			req:    badSeries(pushRequest(7, "t1", 2)),
			status: ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR,
			reason: []string{`invalid metric name "bad\xffname"`, `{__name__="bad\xffname"}`, "(2 accepted, 2 rejected)"},
			accept: 2,
			reject: 2,
			called: true,
		},
		{
			name: "should add the invalid series to what the backend rejects",
			push: func(_ context.Context, _ string, req *prompb.WriteRequest) (backend.Result, error) {
				return backend.Result{Accepted: backend.Count(req) - 1, Rejected: 1}, backend.NewClientError("duplicate sample")
			},
			req:    badSeries(pushRequest(8, "t1", 2)),
			status: ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR,
			reason: []string{"duplicate sample", "(1 accepted, 3 rejected)"},
			accept: 1,
			reject: 3,
			called: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, unary := range []bool{false, true} {
				t.Run(map[bool]string{false: "Push", true: "PushOne"}[unary], func(t *testing.T) {
					checkGoroutines(t)
					var called atomic.Bool
					b := &stubBackend{push: func(ctx context.Context, tenant string, req *prompb.WriteRequest) (backend.Result, error) {
						called.Store(true)
						if tenant != tc.req.Tenant {
							t.Errorf("backend got tenant %q, want %q", tenant, tc.req.Tenant)
						}
						if tc.push == nil {
							return backend.Result{Accepted: backend.Count(req)}, nil
						}
						return tc.push(ctx, tenant, req)
					}}
					h := startServer(t, testConfig(t), b)
					resp := pushVia(testContext(t), t, h.client, unary, tc.req)
					if resp.RequestId != tc.req.RequestId {
						t.Errorf("request_id = %d, want %d", resp.RequestId, tc.req.RequestId)
					}
					if resp.Status != tc.status {
						t.Errorf("status = %s, want %s (reason %q)", resp.Status, tc.status, resp.Reason)
					}
					for _, want := range tc.reason {
						if !strings.Contains(resp.Reason, want) {
							t.Errorf("reason = %q, want it to contain %q", resp.Reason, want)
						}
					}
					if len(tc.reason) == 0 && resp.Reason != "" {
						t.Errorf("reason = %q, want none", resp.Reason)
					}
					switch {
					case tc.retryMs < 0 && resp.RetryAfterMs <= 0:
						t.Errorf("retry_after_ms = %d, want a positive hint", resp.RetryAfterMs)
					case tc.retryMs >= 0 && resp.RetryAfterMs != tc.retryMs:
						t.Errorf("retry_after_ms = %d, want %d", resp.RetryAfterMs, tc.retryMs)
					}
					if resp.AcceptedSamples != tc.accept || resp.RejectedSamples != tc.reject {
						t.Errorf("%d accepted, %d rejected; want %d, %d", resp.AcceptedSamples, resp.RejectedSamples, tc.accept, tc.reject)
					}
					if called.Load() != tc.called {
						t.Errorf("backend called = %t, want %t", called.Load(), tc.called)
					}
				})
			}
		})
	}
}

func TestPushOversizedRequestKeepsTheStream(t *testing.T) {
	checkGoroutines(t)
	var calls atomic.Int32
	b := &stubBackend{push: func(_ context.Context, _ string, req *prompb.WriteRequest) (backend.Result, error) {
		calls.Add(1)
		return backend.Result{Accepted: backend.Count(req)}, nil
	}}
	h := startServer(t, testConfig(t, "-pusher.max-request-bytes", "1024"), b)
	ctx := testContext(t)
	stream, err := h.client.Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	big := pushRequest(1, "t1", 100)
	if size := big.WriteRequest.Size(); size <= 1024 {
		t.Fatalf("test request of %d bytes is not over the limit", size)
	}
	if err := stream.Send(big); err != nil {
		t.Fatal(err)
	}
	resp := recv(t, stream)
	if resp.RequestId != 1 || resp.Status != ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR {
		t.Errorf("oversized request: %d %s, want 1 CLIENT_ERROR", resp.RequestId, resp.Status)
	}
	if !strings.Contains(resp.Reason, "larger than the limit of 1024") || resp.RejectedSamples != 100 {
		t.Errorf("oversized request: reason %q, %d rejected; want the limit named and 100 rejected", resp.Reason, resp.RejectedSamples)
	}
	if err := stream.Send(pushRequest(2, "t1", 1)); err != nil {
		t.Fatalf("Send after the oversized request: %v", err)
	}
	if resp := recv(t, stream); resp.RequestId != 2 || resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
		t.Errorf("next request: %d %s %q, want 2 OK", resp.RequestId, resp.Status, resp.Reason)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("backend called %d times, want only for the small request", n)
	}
}

// blockingBackend's Push signals started and waits for release or the end
// of its context.
func blockingBackend(started chan<- string, release <-chan struct{}) *stubBackend {
	return &stubBackend{push: func(ctx context.Context, tenant string, req *prompb.WriteRequest) (backend.Result, error) {
		started <- tenant
		select {
		case <-release:
			return backend.Result{Accepted: backend.Count(req)}, nil
		case <-ctx.Done():
			return backend.Result{}, ctx.Err()
		}
	}}
}

func TestPushInflightLimit(t *testing.T) {
	checkGoroutines(t)
	started := make(chan string, 10)
	release := make(chan struct{})
	h := startServer(t, testConfig(t, "-pusher.max-inflight-requests", "1"), blockingBackend(started, release))
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	ctx := testContext(t)
	stream, err := h.client.Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(pushRequest(1, "t1", 1)); err != nil {
		t.Fatal(err)
	}
	await(ctx, t, "the first request to reach the backend", started)

	if err := stream.Send(pushRequest(2, "t2", 1)); err != nil {
		t.Fatal(err)
	}
	resp := recv(t, stream)
	if resp.RequestId != 2 || resp.Status != ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR {
		t.Fatalf("second request: %d %s, want 2 SERVER_ERROR", resp.RequestId, resp.Status)
	}
	if resp.RetryAfterMs != backend.ErrOverloaded.RetryAfter.Milliseconds() || resp.Reason != backend.ErrOverloaded.Reason {
		t.Errorf("second request: retry after %d ms, reason %q; want %d ms, %q",
			resp.RetryAfterMs, resp.Reason, backend.ErrOverloaded.RetryAfter.Milliseconds(), backend.ErrOverloaded.Reason)
	}
	one, err := h.client.PushOne(ctx, pushRequest(3, "t3", 1))
	if err != nil {
		t.Fatal(err)
	}
	if one.Status != ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR || one.RetryAfterMs <= 0 {
		t.Errorf("PushOne at the limit: %s, retry after %d ms; want SERVER_ERROR with a hint", one.Status, one.RetryAfterMs)
	}

	releaseOnce()
	if resp := recv(t, stream); resp.RequestId != 1 || resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
		t.Errorf("first request: %d %s, want 1 OK", resp.RequestId, resp.Status)
	}
	// The slot is free again.
	if err := stream.Send(pushRequest(4, "t2", 1)); err != nil {
		t.Fatal(err)
	}
	if resp := recv(t, stream); resp.RequestId != 4 || resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
		t.Errorf("request after the release: %d %s %q, want 4 OK", resp.RequestId, resp.Status, resp.Reason)
	}
}

func TestSync(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sync    func(context.Context) (int, error)
		tenants int32
		code    codes.Code
	}{
		{
			name:    "should report the tenants the backend flushed",
			sync:    func(context.Context) (int, error) { return 7, nil },
			tenants: 7,
			code:    codes.OK,
		},
		{
			name: "should answer Unavailable when the backend cannot sync",
			sync: func(context.Context) (int, error) { return 0, errors.New("fsync: input/output error") },
			code: codes.Unavailable,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkGoroutines(t)
			var calls atomic.Int32
			b := &stubBackend{sync: func(ctx context.Context) (int, error) {
				calls.Add(1)
				return tc.sync(ctx)
			}}
			h := startServer(t, testConfig(t), b)
			resp, err := h.client.Sync(testContext(t), &ferryv1.SyncRequest{})
			if got := status.Code(err); got != tc.code {
				t.Fatalf("Sync() = %v, want code %s", err, tc.code)
			}
			if err != nil && !strings.Contains(err.Error(), "input/output error") {
				t.Errorf("Sync() = %v, want the backend's error in it", err)
			}
			if err == nil && resp.Tenants != tc.tenants {
				t.Errorf("tenants = %d, want %d", resp.Tenants, tc.tenants)
			}
			if calls.Load() != 1 {
				t.Errorf("backend Sync called %d times, want once", calls.Load())
			}
		})
	}
}

// tenantSyncBackend is a stubBackend that can also sync named tenants.
type tenantSyncBackend struct {
	stubBackend
	syncTenants func(ctx context.Context, tenants []string) (int, error)
}

func (b *tenantSyncBackend) SyncTenants(ctx context.Context, tenants []string) (int, error) {
	return b.syncTenants(ctx, tenants)
}

// manyTenants returns n tenant names.
func manyTenants(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("tenant-%d", i)
	}
	return out
}

// TestSyncNamesTheTenantsToABackendThatCanSyncThemAlone: a request naming
// tenants reaches a TenantSyncer's SyncTenants with those names; one
// naming none, or any request to another backend, syncs everything.
func TestSyncNamesTheTenantsToABackendThatCanSyncThemAlone(t *testing.T) {
	for _, tc := range []struct {
		name        string
		tenants     []string
		syncer      bool
		wantTenants []string // nil: Sync, not SyncTenants
	}{
		{"named tenants, a tenant syncer", []string{"a", "b"}, true, []string{"a", "b"}},
		{"no tenants, a tenant syncer", nil, true, nil},
		{"named tenants, another backend", []string{"a"}, false, nil},
		{"more tenants than a Sync may name", manyTenants(maxSyncTenants + 1), true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []string
			var all int
			stub := stubBackend{sync: func(context.Context) (int, error) {
				mu.Lock()
				all++
				mu.Unlock()
				return 3, nil
			}}
			var b backend.Backend = &stub
			if tc.syncer {
				b = &tenantSyncBackend{stubBackend: stub, syncTenants: func(_ context.Context, tenants []string) (int, error) {
					mu.Lock()
					got = append(got, tenants...)
					mu.Unlock()
					return len(tenants), nil
				}}
			}
			h := startServer(t, testConfig(t), b)
			if _, err := h.client.Sync(testContext(t), &ferryv1.SyncRequest{Tenants: tc.tenants}); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(got, tc.wantTenants) || (tc.wantTenants == nil) != (all == 1) {
				t.Errorf("the backend synced tenants %v and everything %d times; want tenants %v, everything %v",
					got, all, tc.wantTenants, tc.wantTenants == nil)
			}
		})
	}
}

// panicValue must never reach a client.
const panicValue = "secret-internal-detail"

// panicOnce is a backend that panics on its first Push and accepts after.
func panicOnce() *stubBackend {
	var calls atomic.Int32
	return &stubBackend{push: func(_ context.Context, _ string, req *prompb.WriteRequest) (backend.Result, error) {
		if calls.Add(1) == 1 {
			panic(panicValue)
		}
		return backend.Result{Accepted: backend.Count(req)}, nil
	}}
}

func TestPushOnePanicIsInternal(t *testing.T) {
	checkGoroutines(t)
	h := startServer(t, testConfig(t, "-pusher.max-inflight-requests", "1"), panicOnce())
	ctx := testContext(t)
	_, err := h.client.PushOne(ctx, pushRequest(1, "t1", 1))
	if status.Code(err) != codes.Internal {
		t.Fatalf("PushOne() = %v, want code Internal", err)
	}
	if msg := status.Convert(err).Message(); strings.Contains(msg, panicValue) || len(msg) > 100 {
		t.Errorf("PushOne() message %q: want it short and without the panic value", msg)
	}
	// Still serving, and the in-flight slot was given back.
	resp, err := h.client.PushOne(ctx, pushRequest(2, "t1", 1))
	if err != nil || resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
		t.Fatalf("PushOne after the panic = %v, %v; want OK", resp, err)
	}
}

func TestPushPanicIsServerError(t *testing.T) {
	checkGoroutines(t)
	h := startServer(t, testConfig(t, "-pusher.max-inflight-requests", "1"), panicOnce())
	ctx := testContext(t)
	stream, err := h.client.Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(pushRequest(1, "t1", 1)); err != nil {
		t.Fatal(err)
	}
	resp := recv(t, stream)
	if resp.RequestId != 1 || resp.Status != ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR || resp.RetryAfterMs <= 0 {
		t.Errorf("request with a panic: %d %s, retry after %d ms; want 1 SERVER_ERROR with a hint", resp.RequestId, resp.Status, resp.RetryAfterMs)
	}
	if strings.Contains(resp.Reason, panicValue) {
		t.Errorf("reason %q contains the panic value", resp.Reason)
	}
	if err := stream.Send(pushRequest(2, "t1", 1)); err != nil {
		t.Fatal(err)
	}
	if resp := recv(t, stream); resp.RequestId != 2 || resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
		t.Errorf("request after the panic: %d %s %q, want 2 OK", resp.RequestId, resp.Status, resp.Reason)
	}
}

func TestShutdownAnswersRequestsInFlight(t *testing.T) {
	checkGoroutines(t)
	started := make(chan string, 10)
	release := make(chan struct{})
	const shutdownTimeout = 10 * time.Second
	h := startServer(t, testConfig(t, "-shutdown-timeout", shutdownTimeout.String()), blockingBackend(started, release))
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	ctx := testContext(t)
	health := healthpb.NewHealthClient(h.conn)
	stream, err := h.client.Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(pushRequest(1, "t1", 2)); err != nil {
		t.Fatal(err)
	}
	await(ctx, t, "the request to reach the backend", started)

	begin := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- h.stop() }()
	waitFor(ctx, t, "the server to drain", h.srv.draining.Load)

	// New requests are refused while the stream finishes.
	resp, err := h.client.PushOne(ctx, pushRequest(2, "t2", 1))
	if err != nil {
		t.Fatalf("PushOne while draining: %v", err)
	}
	if resp.Status != ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR || resp.Reason != backend.ErrShuttingDown.Reason ||
		resp.RetryAfterMs != backend.ErrShuttingDown.RetryAfter.Milliseconds() {
		t.Errorf("PushOne while draining: %s %q, retry after %d ms; want SERVER_ERROR %q with %s",
			resp.Status, resp.Reason, resp.RetryAfterMs, backend.ErrShuttingDown.Reason, backend.ErrShuttingDown.RetryAfter)
	}
	if hc, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: serviceName}); err != nil ||
		hc.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health while draining = %v, %v; want NOT_SERVING", hc, err)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Run returned %v with a request in flight", err)
	default:
	}

	releaseOnce()
	if resp := recv(t, stream); resp.RequestId != 1 || resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
		t.Errorf("request in flight: %d %s %q, want 1 OK", resp.RequestId, resp.Status, resp.Reason)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("Recv after the last answer = %v, want code Unavailable", err)
	}
	if err := await(ctx, t, "Run to return", stopped); err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
	if elapsed := time.Since(begin); elapsed >= shutdownTimeout {
		t.Errorf("Run took %s to return, want less than the shutdown timeout %s", elapsed, shutdownTimeout)
	}
	if _, err := h.client.PushOne(ctx, pushRequest(3, "t1", 1)); status.Code(err) != codes.Unavailable {
		t.Errorf("PushOne after Run returned = %v, want code Unavailable", err)
	}
}

func TestShutdownForcesStopAfterTimeout(t *testing.T) {
	checkGoroutines(t)
	started := make(chan string, 10)
	ctxErr := make(chan error, 1)
	b := &stubBackend{push: func(ctx context.Context, tenant string, _ *prompb.WriteRequest) (backend.Result, error) {
		started <- tenant
		<-ctx.Done() // never done on its own
		ctxErr <- ctx.Err()
		return backend.Result{}, ctx.Err()
	}}
	const shutdownTimeout = 300 * time.Millisecond
	h := startServer(t, testConfig(t, "-shutdown-timeout", shutdownTimeout.String()), b)
	ctx := testContext(t)
	stream, err := h.client.Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(pushRequest(1, "t1", 1)); err != nil {
		t.Fatal(err)
	}
	await(ctx, t, "the request to reach the backend", started)

	begin := time.Now()
	if err := h.stop(); err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
	elapsed := time.Since(begin)
	if elapsed < shutdownTimeout || elapsed > shutdownTimeout+3*time.Second {
		t.Errorf("Run returned %s after its context ended, want about the shutdown timeout %s", elapsed, shutdownTimeout)
	}
	if err := await(ctx, t, "the backend's context to end", ctxErr); !errors.Is(err, context.Canceled) {
		t.Errorf("backend context error = %v, want context.Canceled", err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("Recv on a stream cut by the forced stop = %v, want code Unavailable", err)
	}
}

func TestRunReturnsWhenTheBackendIgnoresCancellation(t *testing.T) {
	release := make(chan struct{})
	started := make(chan string, 1)
	b := &stubBackend{push: func(_ context.Context, tenant string, _ *prompb.WriteRequest) (backend.Result, error) {
		started <- tenant
		<-release // ignores its context, like a write stuck on a dead disk
		return backend.Result{}, nil
	}}
	defer close(release)
	const shutdownTimeout = 200 * time.Millisecond
	h := startServer(t, testConfig(t, "-shutdown-timeout", shutdownTimeout.String()), b)
	ctx := testContext(t)
	stream, err := h.client.Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(pushRequest(1, "t1", 1)); err != nil {
		t.Fatal(err)
	}
	await(ctx, t, "the request to reach the backend", started)
	begin := time.Now()
	if err := h.stop(); !errors.Is(err, ErrHandlersStuck) {
		t.Errorf("Run() = %v, want ErrHandlersStuck", err)
	}
	h.stopErr = nil // expected: the harness's cleanup must not report it
	if elapsed := time.Since(begin); elapsed > shutdownTimeout+stuckHandlerGrace+2*time.Second {
		t.Errorf("Run returned %s after its context ended, want at most the shutdown timeout plus %s", elapsed, stuckHandlerGrace)
	}
}

func TestHealthServing(t *testing.T) {
	checkGoroutines(t)
	h := startServer(t, testConfig(t), &stubBackend{})
	ctx := testContext(t)
	health := healthpb.NewHealthClient(h.conn)
	for _, service := range []string{"", serviceName} {
		resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("Check(%q): %v", service, err)
		}
		if resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Check(%q) = %s, want SERVING", service, resp.Status)
		}
	}
}

func TestListenFailsOnABusyAddress(t *testing.T) {
	checkGoroutines(t)
	h := startServer(t, testConfig(t), &stubBackend{})
	cfg := testConfig(t)
	cfg.GRPCListenAddress = h.svc.Addr()
	logger := slog.New(slog.DiscardHandler)
	svc, err := Listen(cfg, NewServer(cfg, &stubBackend{}, logger, nil), logger)
	if err == nil {
		svc.lis.Close()
		t.Fatalf("Listen on the busy %s succeeded", cfg.GRPCListenAddress)
	}
	if !strings.Contains(err.Error(), cfg.GRPCListenAddress) {
		t.Errorf("Listen() = %v, want it to name the address", err)
	}
}

// TestDrainWhileStreamsOpen opens and ends streams while the server drains:
// Drain must return, and streams opened during it must end Unavailable.
// Run it with -race: it checks that streams.Add never races streams.Wait.
func TestDrainWhileStreamsOpen(t *testing.T) {
	for round := range 5 {
		t.Run(fmt.Sprint("round ", round), func(t *testing.T) {
			checkGoroutines(t)
			h := startServer(t, testConfig(t), &stubBackend{})
			ctx := testContext(t)
			stop := make(chan struct{})
			var openers sync.WaitGroup
			for range 8 {
				openers.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						if err := openAndClose(ctx, h.client); err != nil && status.Code(err) != codes.Unavailable {
							t.Errorf("stream: %v, want EOF or code Unavailable", err)
							return
						}
					}
				})
			}
			time.Sleep(20 * time.Millisecond)
			drainCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := h.srv.Drain(drainCtx); err != nil {
				t.Errorf("Drain: %v", err)
			}
			// Streams opened from now on are refused.
			if err := openAndClose(ctx, h.client); status.Code(err) != codes.Unavailable {
				t.Errorf("stream opened after Drain: %v, want code Unavailable", err)
			}
			close(stop)
			openers.Wait()
		})
	}
}

// openAndClose opens a stream, ends its sending side and waits for its end.
// It returns nil if the stream ended cleanly.
func openAndClose(ctx context.Context, client ferryv1.PusherServiceClient) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.Push(ctx)
	if err != nil {
		return err
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// TestPushOneWhileStreamsHoldEveryWorker: Push streams hold their call
// goroutine for their lifetime; once they hold every one the server keeps
// (streamWorkers), a unary call still runs, on a goroutine of its own.
func TestPushOneWhileStreamsHoldEveryWorker(t *testing.T) {
	checkGoroutines(t)
	h := startServer(t, testConfig(t), &stubBackend{})
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	for i := range int(streamWorkers()) + 1 {
		stream, err := h.client.Push(ctx)
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		if _, err := stream.Header(); err != nil { // its handler is running
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	resp, err := h.client.PushOne(ctx, pushRequest(1, "t1", 1))
	if err != nil || resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
		t.Fatalf("PushOne = %v, %v; want OK", resp, err)
	}
}
