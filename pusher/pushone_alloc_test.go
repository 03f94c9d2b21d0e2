//go:build !race

// The race detector makes sync.Pool drop a quarter of what is put back,
// so memory reuse is measured without it.

package pusher

import (
	"context"
	"log/slog"
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// TestPushOneReusesTheWriteRequestBuffer: a PushOne call reads its encoded
// write request into memory earlier calls used, as a stream does, instead
// of allocating a buffer of its size (and dropping the pooled one) on every
// call.
func TestPushOneReusesTheWriteRequestBuffer(t *testing.T) {
	srv := NewServer(testConfig(t), backend.NewDiscard(), slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	req := benchRequest(1000)
	encoded, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	dec := func(v any) error { return v.(*envelope).Unmarshal(encoded) } // what the codec does
	ctx := context.Background()
	call := func() {
		resp, err := pushOneHandler(srv, ctx, dec, nil)
		if err != nil || resp.(*ferryv1.PushResponse).Status != ferryv1.AckStatus_ACK_STATUS_OK {
			t.Fatalf("PushOne = %v, %v; want OK", resp, err)
		}
	}
	call() // fills the pools
	const calls = 50
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range calls {
		call()
	}
	runtime.ReadMemStats(&after)
	perCall := (after.TotalAlloc - before.TotalAlloc) / calls
	if size := uint64(req.WriteRequest.Size()); perCall > size/4 {
		t.Errorf("%d bytes allocated per call of a %d-byte write request, want well below its size", perCall, size)
	}
}
