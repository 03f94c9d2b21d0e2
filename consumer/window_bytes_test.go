package consumer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
	"github.com/ferrylabs/ferry/pusher/pushertest"
)

// holdingBackend holds every push until release is closed, and counts the
// pushes it holds at once.
type holdingBackend struct {
	release chan struct{}

	mu         sync.Mutex
	held, most int
}

func (h *holdingBackend) backend() pushertest.BackendFunc {
	return pushertest.BackendFunc{PushFunc: func(ctx context.Context, _ string, req *prompb.WriteRequest) (backend.Result, error) {
		h.mu.Lock()
		h.held++
		h.most = max(h.most, h.held)
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			h.held--
			h.mu.Unlock()
		}()
		select {
		case <-h.release:
		case <-ctx.Done():
			return backend.Result{}, ctx.Err()
		}
		return backend.Result{Accepted: backend.Count(req)}, nil
	}}
}

func (h *holdingBackend) counts() (held, most int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held, h.most
}

// TestWindowStopsReadingAtMaxInflightBytes sets -consumer.max-inflight-bytes
// to fit three records but not four, with the record bound far away and one
// tenant per record (so no per-tenant bound applies either): while the
// pusher holds every push unanswered, exactly three records are in flight
// and no fourth is fetched past the window.
func TestWindowStopsReadingAtMaxInflightBytes(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	const n = 12
	var recs []*kgo.Record
	var sizes []int
	for i := range n {
		tenant := loadgen.Tenant(i)
		v := testShape.Marshal(tenant, 0)
		sizes = append(sizes, len(v))
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(tenant), Value: v})
	}
	produceRecords(t, manualClient(t, b), recs...)

	h := &holdingBackend{release: make(chan struct{})}
	addr := startPusher(t, h.backend())
	cfg := testConfig(b.Addrs(), topic, "0", addr)
	cfg.MaxInflightRequests = 512
	cfg.MaxInflightBytes = sizes[0] + sizes[1] + sizes[2] + sizes[3] - 1
	c := startConsumer(t, cfg)

	waitFor(t, 30*time.Second, "three pushes held", func() bool { held, _ := h.counts(); return held >= 3 })
	// The bound is proven by nothing more arriving: a window that ignored
	// it would pass all twelve records on within milliseconds, so a
	// fourth push (or a fourth record in flight) within this second fails.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if _, most := h.counts(); most > 3 {
			t.Fatalf("%d pushes held at once, with -consumer.max-inflight-bytes=%d fitting 3 records", most, cfg.MaxInflightBytes)
		}
		if s := c.Stats(); s.Inflight > 3 {
			t.Fatalf("%d records in flight, with -consumer.max-inflight-bytes=%d fitting 3", s.Inflight, cfg.MaxInflightBytes)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(h.release)
	waitCommitted(t, b, cfg.ConsumerGroup, topic, time.Minute)
	if _, most := h.counts(); most != 3 {
		t.Fatalf("at most %d pushes held at once, want 3 (the byte bound)", most)
	}
}
