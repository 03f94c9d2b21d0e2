package pusher

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// orderBackend records, per tenant, the steps it applied in order, fails
// the steps fail says to fail, and notes any concurrent Push of one tenant.
type orderBackend struct {
	mu         sync.Mutex
	applied    map[string][]int
	active     map[string]int
	concurrent bool
	fail       func(tenant string, step int) error
}

func newOrderBackend(fail func(tenant string, step int) error) *orderBackend {
	return &orderBackend{applied: map[string][]int{}, active: map[string]int{}, fail: fail}
}

func (b *orderBackend) backend() *stubBackend {
	return &stubBackend{push: func(_ context.Context, tenant string, req *prompb.WriteRequest) (Result, error) {
		step := int(req.Timeseries[0].Samples[0].Value)
		b.mu.Lock()
		b.active[tenant]++
		if b.active[tenant] > 1 {
			b.concurrent = true
		}
		b.mu.Unlock()
		// Long enough that a second request of the tenant, if it were
		// applied concurrently, would overlap.
		time.Sleep(time.Millisecond)
		b.mu.Lock()
		defer b.mu.Unlock()
		b.active[tenant]--
		if err := b.fail(tenant, step); err != nil {
			return Result{}, err
		}
		b.applied[tenant] = append(b.applied[tenant], step)
		return Result{Accepted: Count(req)}, nil
	}}
}

func (b *orderBackend) steps(tenant string) []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.applied[tenant]...)
}

// sequenced returns tenant's request for step, with sequence step.
func sequenced(id uint64, tenant string, step int) *ferryv1.PushRequest {
	req := pushRequest(uint64(step), tenant, 1)
	req.RequestId = id
	req.Sequence = uint64(step)
	return req
}

// sendAll sends reqs on stream without waiting and returns their answers
// by request ID.
func sendAll(t *testing.T, stream ferryv1.PusherService_PushClient, reqs ...*ferryv1.PushRequest) map[uint64]*ferryv1.PushResponse {
	t.Helper()
	for _, r := range reqs {
		if err := stream.Send(r); err != nil {
			t.Fatalf("Send: %v", err)
		}
	}
	out := map[uint64]*ferryv1.PushResponse{}
	for range reqs {
		resp := recv(t, stream)
		out[resp.RequestId] = resp
	}
	return out
}

func TestSequencedRequestsAreAppliedInOrderAndNeverPastAFailure(t *testing.T) {
	checkGoroutines(t)
	failed := false
	b := newOrderBackend(func(tenant string, step int) error {
		if tenant == "t1" && step == 2 && !failed {
			failed = true
			return &ServerError{Reason: "disk trouble"}
		}
		return nil
	})
	h := startServer(t, testConfig(t), b.backend())
	ctx := testContext(t)
	stream, err := h.client.Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// t1 and t2 interleaved, all in flight at once.
	var reqs []*ferryv1.PushRequest
	id := uint64(0)
	for step := 1; step <= 5; step++ {
		for _, tenant := range []string{"t1", "t2"} {
			id++
			reqs = append(reqs, sequenced(id, tenant, step))
		}
	}
	answers := sendAll(t, stream, reqs...)
	for _, r := range reqs {
		got := answers[r.RequestId]
		want := ferryv1.AckStatus_ACK_STATUS_OK
		if r.Tenant == "t1" && r.Sequence >= 2 {
			want = ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR
		}
		if got.Status != want {
			t.Errorf("%s step %d: %s (%s), want %s", r.Tenant, r.Sequence, got.Status, got.Reason, want)
		}
		if r.Tenant == "t1" && r.Sequence > 2 && !strings.Contains(got.Reason, "an earlier request of this tenant") {
			t.Errorf("t1 step %d: reason %q does not say an earlier request failed", r.Sequence, got.Reason)
		}
	}
	if got := fmt.Sprint(b.steps("t1")); got != "[1]" {
		t.Fatalf("t1 applied %s before its failed request was resent, want [1]", got)
	}
	if got := fmt.Sprint(b.steps("t2")); got != "[1 2 3 4 5]" {
		t.Errorf("t2 applied %s, want [1 2 3 4 5]: another tenant's failure must not hold it up", got)
	}

	// The sender resends from the failed request on, in order.
	var again []*ferryv1.PushRequest
	for step := 2; step <= 5; step++ {
		id++
		again = append(again, sequenced(id, "t1", step))
	}
	for _, resp := range sendAll(t, stream, again...) {
		if resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
			t.Errorf("resent request %d: %s (%s), want OK", resp.RequestId, resp.Status, resp.Reason)
		}
	}
	if got := fmt.Sprint(b.steps("t1")); got != "[1 2 3 4 5]" {
		t.Errorf("t1 applied %s, want [1 2 3 4 5]", got)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.concurrent {
		t.Error("two requests of one tenant were applied at the same time")
	}
}

// failStepOnce is a backend that answers step's first push SERVER_ERROR.
func failStepOnce(step int) *orderBackend {
	failed := false
	return newOrderBackend(func(_ string, s int) error {
		if s == step && !failed {
			failed = true
			return ErrOverloaded
		}
		return nil
	})
}

// TestBarrierOutlivesAnIdleQueue sends a tenant's next request only after
// the failure of the previous one was answered, when the tenant has nothing
// queued: it must still be refused until the failed one is resent.
func TestBarrierOutlivesAnIdleQueue(t *testing.T) {
	b := failStepOnce(1)
	h := startServer(t, testConfig(t), b.backend())
	stream, err := h.client.Push(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		step int
		want ferryv1.AckStatus
	}{
		{1, ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR},
		{2, ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR}, // behind the failed 1
		{1, ferryv1.AckStatus_ACK_STATUS_OK},           // the resend lifts the barrier
		{2, ferryv1.AckStatus_ACK_STATUS_OK},
		{3, ferryv1.AckStatus_ACK_STATUS_OK},
	} {
		resp := sendAll(t, stream, sequenced(uint64(i+1), "t1", c.step))[uint64(i+1)]
		if resp.Status != c.want {
			t.Fatalf("send %d (step %d): %s (%s), want %s", i+1, c.step, resp.Status, resp.Reason, c.want)
		}
	}
	if got := fmt.Sprint(b.steps("t1")); got != "[1 2 3]" {
		t.Errorf("applied %s, want [1 2 3]", got)
	}
}

// TestBarrierIsPerStream: a new stream starts with no barrier, since the
// sender resends everything unanswered on it in order.
func TestBarrierIsPerStream(t *testing.T) {
	b := failStepOnce(1)
	h := startServer(t, testConfig(t), b.backend())
	ctx := testContext(t)
	first, err := h.client.Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if resp := sendAll(t, first, sequenced(1, "t1", 1))[1]; resp.Status != ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR {
		t.Fatalf("first send: %s, want SERVER_ERROR", resp.Status)
	}
	second, err := h.client.Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if resp := sendAll(t, second, sequenced(2, "t1", 2))[2]; resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
		t.Errorf("on a new stream: %s (%s), want OK", resp.Status, resp.Reason)
	}
}

// TestAClientErrorRaisesNoBarrier: a CLIENT_ERROR is final (the sender
// skips the request and never resends it), so the tenant's later requests
// must be applied, not refused behind it: a barrier there would never be
// lifted.
func TestAClientErrorRaisesNoBarrier(t *testing.T) {
	failed := false
	b := newOrderBackend(func(_ string, step int) error {
		if step == 1 && !failed {
			failed = true
			return NewClientError("bad sample")
		}
		return nil
	})
	h := startServer(t, testConfig(t), b.backend())
	stream, err := h.client.Push(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	answers := sendAll(t, stream, sequenced(1, "t1", 1), sequenced(2, "t1", 2), sequenced(3, "t1", 3))
	want := map[uint64]ferryv1.AckStatus{
		1: ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR,
		2: ferryv1.AckStatus_ACK_STATUS_OK,
		3: ferryv1.AckStatus_ACK_STATUS_OK,
	}
	for id, st := range want {
		if got := answers[id]; got.Status != st {
			t.Errorf("request %d: %s (%s), want %s", id, got.Status, got.Reason, st)
		}
	}
	if got := fmt.Sprint(b.steps("t1")); got != "[2 3]" {
		t.Errorf("applied %s, want [2 3]", got)
	}
}
