package pusher

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

// parkHarness drives a sequencer whose apply blocks each tenant until the
// test releases it, and counts the answers.
type parkHarness struct {
	sq      *sequencer
	mu      sync.Mutex
	gates   map[string]chan struct{}
	answers chan string
}

func newParkHarness(t *testing.T) *parkHarness {
	t.Helper()
	h := &parkHarness{gates: map[string]chan struct{}{}, answers: make(chan string, 1000)}
	apply := func(_ context.Context, rs []received, out []answered) {
		<-h.gate(rs[0].req.Tenant)
		for i := range rs {
			out[i] = answered{resp: &ferryv1.PushResponse{RequestId: rs[i].req.RequestId, Status: ferryv1.AckStatus_ACK_STATUS_OK}, applied: true}
		}
	}
	refuse := func(req *ferryv1.PushRequest, err error) answered {
		return answered{resp: &ferryv1.PushResponse{RequestId: req.RequestId, Status: ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR}, err: err}
	}
	send := func(rs []received, _ []answered) {
		for _, r := range rs {
			h.answers <- r.req.Tenant
		}
	}
	h.sq = newSequencer(testContext(t), apply, refuse, send, 1, 1<<20)
	return h
}

// gate is tenant's gate, closed when the test released it.
func (h *parkHarness) gate(tenant string) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	g, ok := h.gates[tenant]
	if !ok {
		g = make(chan struct{})
		h.gates[tenant] = g
	}
	return g
}

func (h *parkHarness) enqueue(tenant string, seq uint64) {
	h.sq.enqueue(received{req: &ferryv1.PushRequest{RequestId: seq, Sequence: seq, Tenant: tenant}})
}

// answer waits for the answer of a request of tenant.
func (h *parkHarness) answer(t *testing.T, tenant string) {
	t.Helper()
	select {
	case got := <-h.answers:
		if got != tenant {
			t.Fatalf("answer for %s, want %s", got, tenant)
		}
	case <-time.After(testTimeout):
		t.Fatalf("no answer for %s", tenant)
	}
}

// waitParked waits until n goroutines are parked.
func (h *parkHarness) waitParked(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		h.sq.mu.Lock()
		parked := len(h.sq.idlers)
		h.sq.mu.Unlock()
		if parked == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines parked, want %d", parked, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAnIdleGoroutineAppliesTheNextTenant: the goroutine that emptied one
// tenant's queue waits and applies the next tenant that becomes busy,
// instead of a new goroutine being started for it.
func TestAnIdleGoroutineAppliesTheNextTenant(t *testing.T) {
	h := newParkHarness(t)
	for i, tenant := range []string{"a", "b", "c", "a"} {
		close(h.gate(tenant + fmt.Sprint(i)))
		h.enqueue(tenant+fmt.Sprint(i), uint64(i+1))
		h.answer(t, tenant+fmt.Sprint(i))
		h.waitParked(t, 1)
	}
	if n := h.sq.started.Load(); n != 1 {
		t.Errorf("%d goroutines started for four tenants taking turns, want 1", n)
	}
	h.sq.wait() // must not wait for the parked goroutine forever
}

// TestWorkThatComesWhileAGoroutineParksGoesToIt: a tenant that becomes
// busy while the only idle goroutine is registering to wait, before it
// waits, is applied by that goroutine. A hand-off that needed the
// goroutine already waiting started a second one in that gap (a flaky
// TestAnIdleGoroutineAppliesTheNextTenant under load).
func TestWorkThatComesWhileAGoroutineParksGoesToIt(t *testing.T) {
	h := newParkHarness(t)
	var once sync.Once
	h.sq.parking = func() {
		// The first park: the next tenant's request comes now.
		once.Do(func() {
			close(h.gate("b"))
			h.enqueue("b", 2)
		})
	}
	close(h.gate("a"))
	h.enqueue("a", 1)
	h.answer(t, "a")
	h.answer(t, "b")
	if n := h.sq.started.Load(); n != 1 {
		t.Errorf("%d goroutines started, want 1: the parking goroutine takes the work", n)
	}
	h.sq.wait()
}

// TestParkedGoroutinesAreBounded: when many tenants were busy at once, at
// most maxParked goroutines stay to wait for work; the rest exit, and wait
// ends the ones that stayed.
func TestParkedGoroutinesAreBounded(t *testing.T) {
	h := newParkHarness(t)
	const busy = maxParked + 20
	for i := range busy {
		h.enqueue(fmt.Sprint("t", i), uint64(i+1))
	}
	if n := h.sq.started.Load(); n != busy {
		t.Fatalf("%d goroutines for %d tenants busy at once, want one each", n, busy)
	}
	for i := range busy {
		close(h.gate(fmt.Sprint("t", i)))
	}
	for range busy {
		select {
		case <-h.answers:
		case <-time.After(testTimeout):
			t.Fatal("not every tenant was answered")
		}
	}
	h.waitParked(t, maxParked)
	done := make(chan struct{})
	go func() {
		h.sq.wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatal("wait did not end the parked goroutines")
	}
}
