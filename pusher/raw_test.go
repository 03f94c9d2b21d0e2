package pusher

import (
	"bytes"
	"context"
	"sync"
	"testing"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// rawBackend is a RawPusher that records which path each request took
// and whether the raw bytes were the request's encoding.
type rawBackend struct {
	stubBackend
	mu          sync.Mutex
	raw, pushed int
	mismatch    bool
}

func (b *rawBackend) Push(ctx context.Context, tenant string, req *prompb.WriteRequest) (Result, error) {
	b.mu.Lock()
	b.pushed++
	b.mu.Unlock()
	return b.stubBackend.Push(ctx, tenant, req)
}

func (b *rawBackend) PushRaw(_ context.Context, _ string, req *prompb.WriteRequest, raw []byte) (Result, error) {
	want, err := req.Marshal()
	b.mu.Lock()
	b.raw++
	b.mismatch = b.mismatch || err != nil || !bytes.Equal(want, raw)
	b.mu.Unlock()
	return Result{Accepted: Count(req)}, nil
}

func TestRawPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		unary   bool
		mangle  func(*ferryv1.PushRequest)
		wantRaw bool
	}{
		{"a whole request on a stream goes the raw path", false, func(*ferryv1.PushRequest) {}, true},
		{"a request validation shortened goes through Push", false, func(r *ferryv1.PushRequest) {
			r.WriteRequest.Timeseries[0].Labels[0].Value = "0bad metric name"
		}, false},
		{"a request with a bad series of no samples goes through Push", false, func(r *ferryv1.PushRequest) {
			r.WriteRequest.Timeseries[0].Labels[0].Value = "0bad metric name"
			r.WriteRequest.Timeseries[0].Samples = nil
		}, false},
		{"a whole PushOne request goes the raw path too", true, func(*ferryv1.PushRequest) {}, true},
		{"a PushOne request validation shortened goes through Push", true, func(r *ferryv1.PushRequest) {
			r.WriteRequest.Timeseries[0].Labels[0].Value = "0bad metric name"
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := &rawBackend{}
			h := startServer(t, testConfig(t), b)
			req := pushRequest(1, "tenant-a", 3)
			tc.mangle(req)
			pushVia(testContext(t), t, h.client, tc.unary, req)
			b.mu.Lock()
			defer b.mu.Unlock()
			if got := b.raw == 1 && b.pushed == 0; got != tc.wantRaw {
				t.Errorf("PushRaw called %d times, Push %d times; want the raw path: %v", b.raw, b.pushed, tc.wantRaw)
			}
			if b.mismatch {
				t.Error("PushRaw got bytes that are not the request's encoding")
			}
		})
	}
}
