package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/proto/wire"
)

func TestRWShapeRequests(t *testing.T) {
	sh := rwShape{Tenants: 2, SeriesPerTenant: 4500, SamplesPerRequest: 2000, StartMs: 1_700_000_000_000, StepMs: 15000}
	if sh.blocks() != 3 {
		t.Fatalf("blocks = %d, want 3", sh.blocks())
	}
	bodies, err := sh.tenantBodies(1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 6 {
		t.Fatalf("%d bodies, want 6 (3 blocks x 2 steps)", len(bodies))
	}
	seen := map[string]int64{} // series -> last timestamp sent
	total := 0
	for i, b := range bodies {
		if b.Tenant != "rw-tenant-1" {
			t.Errorf("body %d: tenant %q", i, b.Tenant)
		}
		raw, err := snappy.Decode(nil, b.Compressed)
		if err != nil || string(raw) != string(b.Raw) {
			t.Fatalf("body %d: the compressed body does not decode to the record value: %v", i, err)
		}
		// The consumer's own check: nothing here would be skipped.
		if err := wire.ValidateWriteRequest(b.Raw); err != nil {
			t.Fatalf("body %d: %v", i, err)
		}
		var req prompb.WriteRequest
		if err := req.Unmarshal(raw); err != nil {
			t.Fatal(err)
		}
		if len(req.Timeseries) != b.Samples {
			t.Errorf("body %d: %d series, Samples says %d", i, len(req.Timeseries), b.Samples)
		}
		for _, ts := range req.Timeseries {
			ls := ts.Labels
			if !sort.SliceIsSorted(ls, func(a, b int) bool { return ls[a].Name < ls[b].Name }) {
				t.Fatalf("labels not sorted: %v", ls)
			}
			if len(ls) < 8 {
				t.Fatalf("%d labels, want a realistic 8 or more: %v", len(ls), ls)
			}
			key := pusherFormat(ls)
			if last, ok := seen[key]; ok && ts.Samples[0].Timestamp <= last {
				t.Fatalf("series %s goes back in time: %d after %d", key, ts.Samples[0].Timestamp, last)
			}
			seen[key] = ts.Samples[0].Timestamp
			total++
		}
	}
	if len(seen) != 4500 {
		t.Errorf("%d distinct series, want 4500: series labels collide", len(seen))
	}
	if total != 9000 {
		t.Errorf("%d samples, want 9000", total)
	}
	// Tenants do not share series: Prometheus stores them in one TSDB.
	other, _ := sh.body(0, 0, 0)
	var req prompb.WriteRequest
	if err := req.Unmarshal(other.Raw); err != nil {
		t.Fatal(err)
	}
	if _, ok := seen[pusherFormat(req.Timeseries[0].Labels)]; ok {
		t.Error("tenant 0's first series is also tenant 1's")
	}
}

func pusherFormat(ls []prompb.Label) string {
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(l.Name + "=" + l.Value + ",")
	}
	return b.String()
}

// rwServer is a stub receiver that checks the remote-write headers and
// body, answering 204, or 500 for tenant "bad".
func rwServer(t *testing.T, delay time.Duration) (*httptest.Server, *sync.Map) {
	t.Helper()
	got := &sync.Map{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Encoding") != "snappy" || r.Header.Get("Content-Type") != "application/x-protobuf" ||
			r.Header.Get("X-Prometheus-Remote-Write-Version") != "0.1.0" {
			http.Error(w, "bad headers", http.StatusUnsupportedMediaType)
			return
		}
		body, _ := io.ReadAll(r.Body)
		raw, err := snappy.Decode(nil, body)
		var req prompb.WriteRequest
		if err == nil {
			err = req.Unmarshal(raw)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		tenant := r.Header.Get("X-Scope-OrgID")
		n, _ := got.LoadOrStore(tenant, new(int64))
		*n.(*int64)++
		time.Sleep(delay) // the stub's service time, not a wait for the test
		if tenant == "bad" {
			http.Error(w, "no", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func TestClosedLoopCountsAnswers(t *testing.T) {
	srv, _ := rwServer(t, 0)
	sh := rwShape{Tenants: 1, SeriesPerTenant: 10, SamplesPerRequest: 10, StepMs: 1000, StartMs: time.Now().UnixMilli()}
	good, err := sh.body(0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	bad := good
	bad.Tenant = "bad"
	counts := &sendCounts{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	calls := [2]int{}
	closedLoop(ctx, newRWClient(2), srv.URL+"/api/v1/write", 2, func(c, _ int) rwBody {
		mu.Lock()
		defer mu.Unlock()
		// Enough requests of both clients answered: end the run.
		if calls[c]++; calls[0] > 5 && calls[1] > 5 {
			cancel()
		}
		if c == 1 {
			return bad
		}
		return good
	}, counts)
	s := counts.snapshot()
	if s.ok == 0 || s.failed == 0 {
		t.Fatalf("ok %d failed %d: want both (client 0 answered 204, client 1 500)", s.ok, s.failed)
	}
	if s.okSamples != 10*s.ok {
		t.Errorf("ok samples %d for %d requests of 10", s.okSamples, s.ok)
	}
	if !strings.Contains(counts.errString(), "500") {
		t.Errorf("first error %q does not name the status", counts.errString())
	}
}

// TestOpenLoopTimesFromDue checks that a request waiting for a free
// sender is timed from when it was due: with one sender, a 20 ms service
// time and requests due every 5 ms, later requests queue, and their
// latency must grow well past the service time.
func TestOpenLoopTimesFromDue(t *testing.T) {
	srv, got := rwServer(t, 20*time.Millisecond)
	sh := rwShape{Tenants: 1, SeriesPerTenant: 10, SamplesPerRequest: 10, StepMs: 1000, StartMs: time.Now().UnixMilli()}
	b, err := sh.body(0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	counts := &sendCounts{}
	lat := &durations{}
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		openLoop(ctx, newRWClient(1), srv.URL+"/api/v1/write", 200, 1, func(int) rwBody { return b }, counts, start, start.Add(time.Hour), lat)
	}()
	// Wait for 10 answers, then stop.
	for counts.snapshot().ok < 10 {
		select {
		case <-done:
			t.Fatal("openLoop returned early")
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	<-done
	s := lat.summary()
	if s.N < 10 {
		t.Fatalf("%d latencies for %d answers", s.N, counts.snapshot().ok)
	}
	// Request 10 was due at 50 ms and answered after 10 services (at least
	// 200 ms): at least 150 ms late. Measured from when a sender took it,
	// it would be about 20 ms.
	if s.Max < 100*time.Millisecond {
		t.Errorf("max latency %s: the queueing of late requests was not counted", s.Max)
	}
	if n, ok := got.Load("rw-tenant-0"); !ok || *n.(*int64) < 10 {
		t.Errorf("the receiver saw %v requests", n)
	}
}
