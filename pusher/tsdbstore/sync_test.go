package tsdbstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// TestSyncCoversEveryTenantAndACancelledSyncReleasesThem syncs many
// tenants: every one must be counted, a cancelled Sync must release every
// tenant it did not sync (or Close would wait for them forever) and commit
// to nothing, and the next Sync must find them all still to do.
func TestSyncCoversEveryTenantAndACancelledSyncReleasesThem(t *testing.T) {
	s := newTestStore(t, nil)
	const tenants = 40
	push := func(ts int64) {
		for i := range tenants {
			mustPush(t, s, fmt.Sprintf("t%d", i), &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), float64(ts), 1)}})
		}
	}
	push(base)
	if n, err := s.Sync(context.Background()); err != nil || n != tenants {
		t.Fatalf("sync: %d tenants, %v; want %d", n, err, tenants)
	}
	if n, err := s.Sync(context.Background()); err != nil || n != 0 {
		t.Fatalf("second sync: %d tenants, %v; want 0, nothing new", n, err)
	}

	push(base + 1000)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if n, err := s.Sync(ctx); !errors.Is(err, context.Canceled) || n != 0 {
		t.Fatalf("cancelled sync: %d tenants, %v; want 0 and context.Canceled", n, err)
	}
	if n, err := s.Sync(context.Background()); err != nil || n != tenants {
		t.Fatalf("sync after a cancelled one: %d tenants, %v; want %d", n, err, tenants)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("close still waiting after 30s: a Sync kept a reference to a tenant")
	}
}
