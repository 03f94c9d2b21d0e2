package pusher

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/klauspost/compress/snappy"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ferrylabs/ferry/internal/loadgen"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/proto/wire"
)

// TestPushRefusesHostileWriteRequests sends write requests that are
// well-formed protobuf but must not be applied: each is answered
// CLIENT_ERROR with a reason that names the problem, never reaches the
// backend, and the stream goes on.
func TestPushRefusesHostileWriteRequests(t *testing.T) {
	checkGoroutines(t)
	var calls atomic.Int32
	b := &stubBackend{push: func(_ context.Context, _ string, req *prompb.WriteRequest) (Result, error) {
		calls.Add(1)
		return Result{Accepted: Count(req)}, nil
	}}
	h := startServer(t, testConfig(t, "-limits.max-series-per-request", "100", "-limits.max-samples-per-series", "10"), b)
	ctx := testContext(t)
	stream, err := h.client.Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	good := loadgen.Shape{Series: 150, StartMs: 1, StepMs: 1}.Marshal("tenant-1", 0)
	label := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte{0x0a, 0x01, 'a', 0x12, 0x01, 'b'})
	sample := []byte{0x12, 0x00}
	manySamples := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), append(label, bytes.Repeat(sample, 11)...))
	for i, tc := range []struct {
		name, value, reason string
	}{
		{"a 4 MiB request of empty series", string(bytes.Repeat([]byte{0x0a, 0x00}, 2<<20)), "series in one request, more than 100"},
		{"empty series", string(bytes.Repeat([]byte{0x0a, 0x00}, 50)), "write_request refused: series 0: a series without labels"},
		{"a remote-write 2.0 request", "\x22\x00\x22\x08__name__\x2a\x04\x0a\x02\x01\x01", "remote-write 2.0 request"},
		{"a snappy-compressed request", string(snappy.Encode(nil, good)), "snappy-compressed value"},
		{"more series than the limit", string(good), "series in one request, more than 100"},
		{"more samples in a series than the limit", string(manySamples), "more than 10 samples"},
		{"series that decode to far more than their size", string(bytes.Repeat([]byte{0x0a, 0x06, 0x0a, 0x00, 0x22, 0x00, 0x22, 0x00}, 90)), "times its size once decoded"},
	} {
		req := &wire.PushRequest{RequestID: uint64(i + 1), Tenant: "t1", Value: []byte(tc.value)}
		if err := stream.SendMsg(req); err != nil {
			t.Fatalf("%s: Send: %v", tc.name, err)
		}
		resp := recv(t, stream)
		if resp.RequestId != req.RequestID || resp.Status != ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR || !strings.Contains(resp.Reason, tc.reason) {
			t.Errorf("%s: %d %s %q, want CLIENT_ERROR naming %q", tc.name, resp.RequestId, resp.Status, resp.Reason, tc.reason)
		}
		// PushOne decodes under the same limits.
		one := new(ferryv1.PushResponse)
		if err := h.conn.Invoke(ctx, "/ferry.v1.PusherService/PushOne", req, one); err != nil {
			t.Fatalf("%s: PushOne: %v", tc.name, err)
		}
		if one.RequestId != req.RequestID || one.Status != ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR || !strings.Contains(one.Reason, tc.reason) {
			t.Errorf("%s by PushOne: %d %s %q, want CLIENT_ERROR naming %q", tc.name, one.RequestId, one.Status, one.Reason, tc.reason)
		}
	}
	if err := stream.Send(pushRequest(100, "t1", 1)); err != nil {
		t.Fatal(err)
	}
	if resp := recv(t, stream); resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
		t.Errorf("a good request after them: %s %q", resp.Status, resp.Reason)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("backend called %d times, want once, for the good request", n)
	}
}

// TestPushRefusesInvalidTenantIDs holds both Push and PushOne to the
// tenant-ID rule shared by every entry point (internal/tenant): an ID the
// query header could never carry is a client error, not stored data that
// can never be read.
func TestPushRefusesInvalidTenantIDs(t *testing.T) {
	checkGoroutines(t)
	var calls atomic.Int32
	b := &stubBackend{push: func(_ context.Context, _ string, req *prompb.WriteRequest) (Result, error) {
		calls.Add(1)
		return Result{Accepted: Count(req)}, nil
	}}
	h := startServer(t, testConfig(t), b)
	ctx := testContext(t)
	for _, unary := range []bool{false, true} {
		for _, id := range []string{" tenant", "tenant\t1", "a/b", "..", "tenant\x00", strings.Repeat("x", 151)} {
			resp := pushVia(ctx, t, h.client, unary, pushRequest(1, id, 1))
			if resp.Status != ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR || !strings.Contains(resp.Reason, "invalid tenant ID") {
				t.Errorf("unary=%v tenant %q: %s %q, want CLIENT_ERROR naming the tenant ID", unary, id, resp.Status, resp.Reason)
			}
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("backend called %d times", n)
	}
}
