package remotewrite

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/ferrylabs/ferry/internal/benchfixture"
)

// BenchmarkPushRaw is the remote-write backend's cost of forwarding one
// request of 2,000 node-exporter series as it came from Kafka: compress,
// post, read the answer. The receiver reads the body and answers 204, so
// the process CPU (cpu-ns/op) is the client's work plus a minimal server.
func BenchmarkPushRaw(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	c, err := New(testConfig(srv.URL), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := benchfixture.NodeRequest(2000, 1_700_000_000_000)
	raw, err := req.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	start := benchfixture.CPUTime(b)
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.PushRaw(ctx, "tenant", raw, int64(len(req.Timeseries))); err != nil {
			b.Fatal(err)
		}
	}
	benchfixture.ReportCPU(b, start)
}
