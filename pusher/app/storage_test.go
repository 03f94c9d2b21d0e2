package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/poll"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
)

func readyStatus(t *testing.T, p *Process) int {
	t.Helper()
	resp, err := http.Get("http://" + p.HTTPAddr() + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestReadyFailsWhileStorageCannotBeWrittenOrDraining: /ready combines the
// server's draining with the store's check of its storage root.
func TestReadyFailsWhileStorageCannotBeWrittenOrDraining(t *testing.T) {
	var path string
	p := startPusher(t, func(c *Config) { path = c.TSDB.Path })
	if got := readyStatus(t, p); got != http.StatusOK {
		t.Fatalf("/ready %d, want 200", got)
	}
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	if got := readyStatus(t, p); got == http.StatusOK {
		t.Fatal("/ready 200 with the storage root gone")
	}
	if page := getPage(t, "http://"+p.HTTPAddr()+"/"); !strings.Contains(page, "no: tsdb storage") {
		t.Errorf("the status page does not say what /ready says with the storage root gone:\n%s", page)
	}
	if err := os.MkdirAll(path, 0o750); err != nil {
		t.Fatal(err)
	}
	if got := readyStatus(t, p); got != http.StatusOK {
		t.Fatalf("/ready %d once the storage root is back", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Server.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readyStatus(t, p); got == http.StatusOK {
		t.Fatal("/ready 200 while draining")
	}
}

func TestSecondPusherOnOneStoragePathRefusesToStart(t *testing.T) {
	var path string
	startPusher(t, func(c *Config) { path = c.TSDB.Path })
	p, err := Start(testConfig(path), slog.New(slog.DiscardHandler))
	if err == nil {
		_ = p.Backend.Close()
		t.Fatal("a second pusher started on the same -storage.path")
	}
	if !strings.Contains(err.Error(), path) {
		t.Fatalf("error %q does not name the path", err)
	}
}

// TestVanishedTenantDirectoryOverGRPC is the probe's scenario through the
// service: after the tenant's directory is removed, a push is answered
// SERVER_ERROR (the consumer resends it) and Sync fails until the tenant
// is reopened; then the resent push is stored next to what was
// acknowledged before, and a restart on the same path finds it all.
func TestVanishedTenantDirectoryOverGRPC(t *testing.T) {
	path := t.TempDir()
	ctx := context.Background()
	p, stop := startStoppable(t, path)
	client := ferryv1.NewPusherServiceClient(dial(t, p.GRPCAddr()))
	now := time.Now().UnixMilli()
	push := func(ts int64, v float64) *ferryv1.PushResponse {
		t.Helper()
		resp, err := client.PushOne(ctx, &ferryv1.PushRequest{Tenant: "a", WriteRequest: prompb.WriteRequest{
			Timeseries: []prompb.TimeSeries{series(ts, v, "__name__", "x")}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := push(now-2000, 1); resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
		t.Fatalf("first push: %s %s", resp.Status, resp.Reason)
	}
	if _, err := client.Sync(ctx, &ferryv1.SyncRequest{}); err != nil {
		t.Fatal(err)
	}
	if resp := push(now-1000, 2); resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
		t.Fatalf("second push: %s %s", resp.Status, resp.Reason)
	}
	if err := os.RemoveAll(filepath.Join(path, "a")); err != nil {
		t.Fatal(err)
	}
	if resp := push(now, 3); resp.Status != ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR {
		t.Fatalf("push after the removal: %s %s, want SERVER_ERROR", resp.Status, resp.Reason)
	}
	poll.Until(t, 10*time.Second, 10*time.Millisecond, "Sync succeeds once the tenant is reopened", func() bool {
		_, err := client.Sync(ctx, &ferryv1.SyncRequest{})
		return err == nil
	})
	if resp := push(now, 3); resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
		t.Fatalf("resent push: %s %s", resp.Status, resp.Reason)
	}
	if _, err := client.Sync(ctx, &ferryv1.SyncRequest{}); err != nil {
		t.Fatal(err)
	}
	stop()

	p2, _ := startStoppable(t, path)
	req, err := http.NewRequest(http.MethodGet, "http://"+p2.HTTPAddr()+"/api/v1/query?query=count_over_time(x[1m])&time="+strconv.FormatInt(now/1000+1, 10), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Scope-OrgID", "a")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !strings.Contains(string(body), `"3"`) {
		t.Fatalf("after the restart: %s, want 3 samples", body)
	}
}

// startStoppable starts a pusher on path; stop ends it (and is called at
// the end of the test if it was not).
func startStoppable(t *testing.T, path string) (*Process, func()) {
	t.Helper()
	p, err := Start(testConfig(path), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("pusher run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return p, stop
}
