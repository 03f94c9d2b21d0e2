package pusher

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// TestServerErrorsAreLoggedRateLimited: a storage failure answered
// SERVER_ERROR shows at the default log level, with tenant and cause, once
// per tenant per interval however often the consumer retries.
func TestServerErrorsAreLoggedRateLimited(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	be := &stubBackend{push: func(context.Context, string, *prompb.WriteRequest) (backend.Result, error) {
		return backend.Result{}, &backend.ServerError{Reason: "tsdb commit: write wal: no space left on device"}
	}}
	srv := NewServer(testConfig(t), be, logger, prometheus.NewRegistry())
	for _, tenant := range []string{"a", "a", "a", "b", "a", "b"} {
		req := pushRequest(1, tenant, 1)
		srv.applier.apply(context.Background(), req, req.WriteRequest.Size(), nil)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d log lines for 6 failures of 2 tenants, want 2:\n%s", len(lines), logs.String())
	}
	for i, tenant := range []string{"a", "b"} {
		if l := lines[i]; !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "tenant="+tenant) || !strings.Contains(l, "no space left on device") {
			t.Errorf("line %d: %s", i, l)
		}
	}
}
