package pusher

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

// TestStreamThatNeverReadsIsHeldBack sends many requests on a stream whose
// client never reads an answer. The pusher must stop reading that stream
// once it holds -pusher.max-pending-per-stream requests, so that gRPC flow
// control blocks the client: goroutines and held requests stay bounded,
// and another stream on the same connection is still served.
func TestStreamThatNeverReadsIsHeldBack(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sequence func(i int) (tenant string, seq uint64)
	}{
		{"unsequenced requests, each applied on its own", func(i int) (string, uint64) { return "t1", 0 }},
		{"sequenced requests of one tenant", func(i int) (string, uint64) { return "t1", uint64(i + 1) }},
		{"sequenced requests of many tenants", func(i int) (string, uint64) { return "t" + string(rune('a'+i%20)), uint64(i + 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) { testStreamNeverRead(t, tc.sequence) })
	}
}

func testStreamNeverRead(t *testing.T, sequence func(i int) (string, uint64)) {
	checkGoroutines(t)
	const bound, requests = 16, 20_000
	h := startServer(t, testConfig(t, "-pusher.max-pending-per-stream", "16"), &stubBackend{})
	ctx := testContext(t)
	before := runtime.NumGoroutine()

	rude, err := h.client.Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := pushRequest(0, "t1", 10)
	var sent atomic.Int64
	senderCtx, stopSender := context.WithCancel(ctx)
	var sender sync.WaitGroup
	sender.Go(func() {
		for i := range requests {
			r := *req
			r.RequestId = uint64(i + 1)
			r.Tenant, r.Sequence = sequence(i)
			if rude.Send(&r) != nil || senderCtx.Err() != nil {
				return
			}
			sent.Add(1)
		}
	})
	t.Cleanup(func() { stopSender(); sender.Wait() })

	// Wait until the rude client is blocked by flow control: its sends
	// stop progressing. Before the bound existed, all of them went through.
	var peakPending int64
	stalled, last := 0, int64(-1)
	waitFor(ctx, t, "the client that never reads to be held back", func() bool {
		peakPending = max(peakPending, h.srv.pending.requests.Load())
		n := sent.Load()
		if n == requests {
			t.Fatalf("the pusher read all %d requests of a client that never reads its answers (%d goroutines, %d requests held)",
				requests, runtime.NumGoroutine(), h.srv.pending.requests.Load())
		}
		if n == last {
			stalled++
		} else {
			stalled, last = 0, n
		}
		return stalled >= 60 // about 300 ms without progress
	})
	if peakPending > bound {
		t.Errorf("the pusher held %d requests of one stream, bound %d", peakPending, bound)
	}
	if extra := runtime.NumGoroutine() - before; extra > bound+30 {
		t.Errorf("%d goroutines more than before the stream, want at most %d", extra, bound+30)
	}

	// A stream that reads its answers is still served beside it.
	polite, err := h.client.Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		r := pushRequest(uint64(i+1), "polite", 1)
		if err := polite.Send(r); err != nil {
			t.Fatalf("Send on the polite stream: %v", err)
		}
		if resp := recv(t, polite); resp.RequestId != r.RequestId || resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
			t.Fatalf("polite request %d: %d %s %q", r.RequestId, resp.RequestId, resp.Status, resp.Reason)
		}
	}
	stopSender()
}

// TestPushOneFloodIsRefusedBeyondThePendingBytes holds PushOne calls in a
// slow backend: beyond -pusher.max-pending-bytes further calls are answered
// SERVER_ERROR at once instead of piling up in the server.
func TestPushOneFloodIsRefusedBeyondThePendingBytes(t *testing.T) {
	checkGoroutines(t)
	started := make(chan string, 64)
	release := make(chan struct{})
	req := pushRequest(1, "t1", 1)
	// Room for two requests, not three.
	room := 2*(req.WriteRequest.Size()+pendingOverhead) + pendingOverhead/2
	h := startServer(t, testConfig(t, "-pusher.max-pending-bytes", itoa(room)), blockingBackend(started, release))
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	ctx := testContext(t)

	answers := make(chan *ferryv1.PushResponse, 2)
	for i := range 2 {
		go func() {
			resp, err := h.client.PushOne(ctx, pushRequest(uint64(i+1), "t1", 1))
			if err != nil {
				t.Errorf("PushOne: %v", err)
			}
			answers <- resp
		}()
		await(ctx, t, "a call to reach the backend", started)
	}
	for i := range 20 {
		resp, err := h.client.PushOne(ctx, pushRequest(uint64(100+i), "t1", 1))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR || resp.RetryAfterMs <= 0 {
			t.Fatalf("call %d beyond the bound: %s %q, want SERVER_ERROR with a retry-after hint", i, resp.Status, resp.Reason)
		}
	}
	if n := h.srv.pending.requests.Load(); n != 2 {
		t.Errorf("%d requests held, want 2", n)
	}
	releaseOnce()
	for range 2 {
		if resp := await(ctx, t, "a held call's answer", answers); resp == nil || resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
			t.Errorf("held call: %v, want OK", resp)
		}
	}
	waitFor(ctx, t, "the held bytes to be given back", func() bool { return h.srv.pending.held.Load() == 0 })
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestStreamWaitsForTheServerWideBound fills -pusher.max-pending-bytes
// with requests held by a slow backend: the stream's further requests are
// not read until there is room again, then applied, not refused.
func TestStreamWaitsForTheServerWideBound(t *testing.T) {
	checkGoroutines(t)
	started := make(chan string, 64)
	release := make(chan struct{})
	req := pushRequest(1, "t1", 1)
	room := 2*(req.WriteRequest.Size()+pendingOverhead) + pendingOverhead/2
	h := startServer(t, testConfig(t, "-pusher.max-pending-bytes", itoa(room)), blockingBackend(started, release))
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce)
	ctx := testContext(t)
	stream, err := h.client.Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	for i := range n {
		if err := stream.Send(pushRequest(uint64(i+1), "t"+strconv.Itoa(i), 1)); err != nil {
			t.Fatal(err)
		}
	}
	await(ctx, t, "a request to reach the backend", started)
	await(ctx, t, "a second request to reach the backend", started)
	if held := h.srv.pending.requests.Load(); held != 2 {
		t.Errorf("%d requests held, want the 2 that fit", held)
	}
	releaseOnce()
	for range n {
		if resp := recv(t, stream); resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
			t.Errorf("request %d: %s %q, want OK: a stream waits for room rather than refusing", resp.RequestId, resp.Status, resp.Reason)
		}
		if held := h.srv.pending.requests.Load(); held > 2 {
			t.Errorf("%d requests held, bound 2", held)
		}
	}
}
