package remotewrite

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsCountRequestsAndSamplesByCode pushes one request the
// receiver accepts and one it refuses, and reads every metric back.
func TestMetricsCountRequestsAndSamplesByCode(t *testing.T) {
	t.Parallel()
	var refuse atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if refuse.Load() {
			http.Error(w, "out of bounds", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	c, reg := newTestClient(t, testConfig(srv.URL))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Push(ctx, "t", testRequest()); err != nil {
		t.Fatal(err)
	}
	refuse.Store(true)
	if _, err := c.Push(ctx, "t", testRequest()); outcomeOf(err) != clientError {
		t.Fatalf("second Push = %v, want a client error", err)
	}
	for _, m := range []struct {
		name, code string
		want       float64
	}{
		{"ferry_pusher_remote_write_requests_total", "204", 1},
		{"ferry_pusher_remote_write_requests_total", "400", 1},
		{"ferry_pusher_remote_write_samples_total", "204", 4},
		{"ferry_pusher_remote_write_samples_total", "400", 4},
		{"ferry_pusher_remote_write_retries_signalled_total", "", 0},
	} {
		if got := counterValue(t, reg, m.name, m.code); got != m.want {
			t.Errorf("%s{code=%q} = %v, want %v", m.name, m.code, got, m.want)
		}
	}
	if got := counterValue(t, reg, "ferry_pusher_remote_write_sent_bytes_total", ""); got <= 0 {
		t.Errorf("sent_bytes_total = %v, want more than 0", got)
	}
	if got := histogramCount(t, reg, "ferry_pusher_remote_write_request_duration_seconds"); got != 2 {
		t.Errorf("request_duration_seconds has %d observations, want 2", got)
	}
}

func histogramCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func TestSecondRegistrationFails(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if _, err := New(testConfig("http://receiver/api/v1/write"), reg); err != nil {
		t.Fatal(err)
	}
	if _, err := New(testConfig("http://receiver/api/v1/write"), reg); err == nil {
		t.Error("a second New on the same registry succeeded, want an error")
	}
}
