package pusher

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
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
	return &stubBackend{push: func(_ context.Context, tenant string, req *prompb.WriteRequest) (backend.Result, error) {
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
			return backend.Result{}, err
		}
		b.applied[tenant] = append(b.applied[tenant], step)
		return backend.Result{Accepted: backend.Count(req)}, nil
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
			return &backend.ServerError{Reason: "disk trouble"}
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
			return backend.ErrOverloaded
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
			return backend.NewClientError("bad sample")
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

// batchBackend is a backend that batches: every Push and PushBatch call is
// recorded as the steps it got, answered per step by answer, or failed
// whole by fail. Call number gateCall (the first by default) waits for
// gate, after saying so on started, so that a test can queue requests
// behind it.
type batchBackend struct {
	stubBackend
	answer func(step int) (backend.Result, error)
	fail   func(call int) error

	gateCall int
	gate     chan struct{}
	started  chan struct{}

	mu    sync.Mutex
	calls [][]int
}

func newBatchBackend() *batchBackend {
	return &batchBackend{
		answer:   func(int) (backend.Result, error) { return backend.Result{Accepted: 1}, nil },
		fail:     func(int) error { return nil },
		gateCall: 1,
		gate:     make(chan struct{}),
		started:  make(chan struct{}),
	}
}

func stepOf(req *prompb.WriteRequest) int { return int(req.Timeseries[0].Samples[0].Value) }

// call records a call of reqs and waits at the gate if it is the first.
func (b *batchBackend) call(reqs ...*prompb.WriteRequest) int {
	steps := make([]int, len(reqs))
	for i, r := range reqs {
		steps[i] = stepOf(r)
	}
	b.mu.Lock()
	b.calls = append(b.calls, steps)
	n := len(b.calls)
	b.mu.Unlock()
	if n == b.gateCall {
		close(b.started)
		<-b.gate
	}
	return n
}

func (b *batchBackend) Push(_ context.Context, _ string, req *prompb.WriteRequest) (backend.Result, error) {
	if err := b.fail(b.call(req)); err != nil {
		return backend.Result{}, err
	}
	return b.answer(stepOf(req))
}

func (b *batchBackend) PushBatch(_ context.Context, _ string, reqs []*prompb.WriteRequest, out []backend.Outcome) error {
	if err := b.fail(b.call(reqs...)); err != nil {
		return err
	}
	for i, r := range reqs {
		res, err := b.answer(stepOf(r))
		out[i] = backend.Outcome{Result: res, Err: err}
	}
	return nil
}

func (b *batchBackend) recorded() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprint(b.calls)
}

// seqHarness drives a stream's sequencer directly, without gRPC, so that
// what is queued when is up to the test.
type seqHarness struct {
	srv     *Server
	sq      *sequencer
	answers chan *ferryv1.PushResponse

	mu    sync.Mutex
	sends []int // the answers given to each call of the stream's send
}

func newSeqHarness(t *testing.T, b backend.Backend) *seqHarness {
	t.Helper()
	reg := prometheus.NewRegistry()
	h := &seqHarness{srv: NewServer(testConfig(t), b, slog.New(slog.DiscardHandler), reg), answers: make(chan *ferryv1.PushResponse, 100)}
	send := func(rs []received, as []answered) {
		h.mu.Lock()
		h.sends = append(h.sends, len(rs))
		h.mu.Unlock()
		for i, r := range rs {
			h.answers <- h.srv.applier.settle(r.req, as[i])
		}
	}
	h.sq = newSequencer(testContext(t), h.srv.applier.applyTenant, h.srv.applier.unapplied, send, h.srv.applier.batchRequests(), h.srv.cfg.MaxBatchBytes)
	t.Cleanup(h.sq.wait)
	return h
}

// enqueue queues tenant t1's request for step, sequence step; bad makes it
// a request that did not decode.
func (h *seqHarness) enqueue(step int, bad bool) {
	req := sequenced(uint64(step), "t1", step)
	r := received{req: req, size: req.WriteRequest.Size()}
	if bad {
		r.bad = backend.NewClientError("cannot decode")
	}
	h.sq.enqueue(r)
}

// queueBehindGate queues steps[0], waits until b's gated call holds it,
// queues the other steps behind it, then opens the gate: what the first
// call held up is queued together when the sequencer looks again. The
// step bad (0: none) is a request that did not decode.
func (h *seqHarness) queueBehindGate(b *batchBackend, bad int, steps ...int) {
	h.enqueue(steps[0], steps[0] == bad)
	<-b.started
	for _, step := range steps[1:] {
		h.enqueue(step, step == bad)
	}
	close(b.gate)
}

// next returns the next n answers, in the order sent.
func (h *seqHarness) next(t *testing.T, n int) []*ferryv1.PushResponse {
	t.Helper()
	out := make([]*ferryv1.PushResponse, n)
	for i := range out {
		select {
		case out[i] = <-h.answers:
		case <-time.After(testTimeout):
			t.Fatalf("answer %d of %d did not come", i+1, n)
		}
	}
	return out
}

// TestQueuedRequestsAreAppliedTogether: what queues behind a tenant's
// request being applied goes to the batching backend in one call, and
// every request is answered on its own: a client error in the middle, a
// request that did not decode, and the others OK, in order.
func TestQueuedRequestsAreAppliedTogether(t *testing.T) {
	b := newBatchBackend()
	b.answer = func(step int) (backend.Result, error) {
		if step == 3 {
			return backend.Result{Accepted: 1, Rejected: 2}, backend.NewClientError("bad sample in %d", step)
		}
		return backend.Result{Accepted: 1}, nil
	}
	h := newSeqHarness(t, b)
	h.queueBehindGate(b, 4, 1, 2, 3, 4, 5)
	answers := h.next(t, 5)
	for i, want := range []struct {
		status             ferryv1.AckStatus
		accepted, rejected int64
		reason             string
	}{
		{ferryv1.AckStatus_ACK_STATUS_OK, 1, 0, ""},
		{ferryv1.AckStatus_ACK_STATUS_OK, 1, 0, ""},
		{ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR, 1, 2, "bad sample in 3 (1 accepted, 2 rejected)"},
		{ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR, 0, 0, "cannot decode (0 accepted, 0 rejected)"},
		{ferryv1.AckStatus_ACK_STATUS_OK, 1, 0, ""},
	} {
		got := answers[i]
		if got.RequestId != uint64(i+1) || got.Status != want.status || got.AcceptedSamples != want.accepted ||
			got.RejectedSamples != want.rejected || got.Reason != want.reason {
			t.Errorf("answer %d: request %d %s %d/%d %q, want request %d %s %d/%d %q", i, got.RequestId, got.Status,
				got.AcceptedSamples, got.RejectedSamples, got.Reason, i+1, want.status, want.accepted, want.rejected, want.reason)
		}
	}
	if got := b.recorded(); got != "[[1] [2 3 5]]" {
		t.Errorf("backend calls %s, want [[1] [2 3 5]]: the queued requests in one call, without the one that did not decode", got)
	}
}

// TestAnApplyCallsAnswersGoToTheStreamTogether: the answers of the
// requests applied in one call, a request that did not decode among them,
// are handed to the stream in one call, so that they can share a message.
func TestAnApplyCallsAnswersGoToTheStreamTogether(t *testing.T) {
	b := newBatchBackend()
	h := newSeqHarness(t, b)
	h.queueBehindGate(b, 3, 1, 2, 3, 4, 5)
	for i, a := range h.next(t, 5) {
		if a.RequestId != uint64(i+1) {
			t.Errorf("answer %d is request %d's, want the order received", i, a.RequestId)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if got := fmt.Sprint(h.sends); got != "[1 4]" {
		t.Errorf("answers per send %s, want [1 4]: the first alone, then the four applied together", got)
	}
}

// TestAFailedBatchRaisesTheBarrier: a batch that fails whole answers every
// request SERVER_ERROR, the first of them becomes the barrier, and what
// follows is refused until the first is resent, even a request in the same
// call that would otherwise have been a CLIENT_ERROR.
func TestAFailedBatchRaisesTheBarrier(t *testing.T) {
	b := newBatchBackend()
	b.fail = func(call int) error {
		if call == 2 {
			return &backend.ServerError{Reason: "commit failed"}
		}
		return nil
	}
	h := newSeqHarness(t, b)
	h.queueBehindGate(b, 3, 1, 2, 3, 4)
	answers := h.next(t, 4)
	if a := answers[0]; a.Status != ferryv1.AckStatus_ACK_STATUS_OK {
		t.Errorf("request 1: %s (%s), want OK", a.Status, a.Reason)
	}
	if a := answers[1]; a.Status != ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR || a.Reason != "commit failed" {
		t.Errorf("request 2: %s (%s), want SERVER_ERROR (commit failed)", a.Status, a.Reason)
	}
	for _, a := range answers[2:] {
		if a.Status != ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR || !errorsIsEarlierFailed(a.Reason) {
			t.Errorf("request %d: %s (%s), want SERVER_ERROR behind the failed request 2", a.RequestId, a.Status, a.Reason)
		}
	}
	// Behind the barrier nothing reaches the backend; the resend lifts it.
	h.enqueue(5, false)
	if a := h.next(t, 1)[0]; a.Status != ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR || !errorsIsEarlierFailed(a.Reason) {
		t.Errorf("request 5: %s (%s), want refused behind request 2", a.Status, a.Reason)
	}
	for step := 2; step <= 5; step++ {
		h.enqueue(step, false)
	}
	for _, a := range h.next(t, 4) {
		if a.Status != ferryv1.AckStatus_ACK_STATUS_OK {
			t.Errorf("resent request %d: %s (%s), want OK", a.RequestId, a.Status, a.Reason)
		}
	}
	calls := b.recorded()
	if !strings.HasPrefix(calls, "[[1] [2 4] [2") || strings.Count(calls, "5") != 1 {
		t.Errorf("backend calls %s, want [[1] [2 4] then the resent 2 to 5 once", calls)
	}
}

func errorsIsEarlierFailed(reason string) bool {
	return strings.HasPrefix(reason, ErrEarlierFailed.Reason)
}

// TestBatchedRequestsAreAppliedInOrderAndNeverPastAFailure is
// TestSequencedRequestsAreAppliedInOrderAndNeverPastAFailure's stream with
// a backend that batches.
func TestBatchedRequestsAreAppliedInOrderAndNeverPastAFailure(t *testing.T) {
	checkGoroutines(t)
	failed := false
	ob := newOrderBackend(func(tenant string, step int) error {
		if tenant == "t1" && step == 2 && !failed {
			failed = true
			return &backend.ServerError{Reason: "disk trouble"}
		}
		return nil
	})
	h := startServer(t, testConfig(t), &orderBatcher{stubBackend: ob.backend(), order: ob})
	stream, err := h.client.Push(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	var reqs []*ferryv1.PushRequest
	id := uint64(0)
	for step := 1; step <= 8; step++ {
		for _, tenant := range []string{"t1", "t2"} {
			id++
			reqs = append(reqs, sequenced(id, tenant, step))
		}
	}
	answers := sendAll(t, stream, reqs...)
	firstFailed := 0
	for _, r := range reqs {
		if r.Tenant == "t1" && answers[r.RequestId].Status != ferryv1.AckStatus_ACK_STATUS_OK && firstFailed == 0 {
			firstFailed = int(r.Sequence)
		}
	}
	for _, r := range reqs {
		got := answers[r.RequestId]
		want := ferryv1.AckStatus_ACK_STATUS_OK
		if r.Tenant == "t1" && int(r.Sequence) >= firstFailed {
			want = ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR
		}
		if got.Status != want {
			t.Errorf("%s step %d: %s (%s), want %s", r.Tenant, r.Sequence, got.Status, got.Reason, want)
		}
	}
	// The failure of step 2 fails the call it was in, which may have begun
	// with an earlier step.
	if firstFailed < 1 || firstFailed > 2 {
		t.Fatalf("t1's first failed step is %d, want the call holding step 2 to fail", firstFailed)
	}
	if got, want := fmt.Sprint(ob.steps("t1")), fmt.Sprint(steps(1, firstFailed-1)); got != want {
		t.Fatalf("t1 applied %s before its failed request was resent, want %s", got, want)
	}
	if got := fmt.Sprint(ob.steps("t2")); got != fmt.Sprint(steps(1, 8)) {
		t.Errorf("t2 applied %s, want %v: another tenant's failure must not hold it up", got, steps(1, 8))
	}
	var again []*ferryv1.PushRequest
	for step := firstFailed; step <= 8; step++ {
		id++
		again = append(again, sequenced(id, "t1", step))
	}
	for _, resp := range sendAll(t, stream, again...) {
		if resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
			t.Errorf("resent request %d: %s (%s), want OK", resp.RequestId, resp.Status, resp.Reason)
		}
	}
	if got := fmt.Sprint(ob.steps("t1")); got != fmt.Sprint(steps(1, 8)) {
		t.Errorf("t1 applied %s, want %v", got, steps(1, 8))
	}
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if ob.concurrent {
		t.Error("two requests of one tenant were applied at the same time")
	}
}

// steps returns from, from+1, ..., to.
func steps(from, to int) []int {
	var out []int
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// orderBatcher batches for an orderBackend: a call fails whole at the
// first step that fails, and then applies none of its steps.
type orderBatcher struct {
	*stubBackend
	order *orderBackend
}

func (b *orderBatcher) PushBatch(ctx context.Context, tenant string, reqs []*prompb.WriteRequest, out []backend.Outcome) error {
	b.order.mu.Lock()
	before := len(b.order.applied[tenant])
	b.order.mu.Unlock()
	for i, r := range reqs {
		res, err := b.Push(ctx, tenant, r)
		if err != nil && !backend.IsClientError(err) {
			b.order.mu.Lock()
			b.order.applied[tenant] = b.order.applied[tenant][:before]
			b.order.mu.Unlock()
			return err
		}
		out[i] = backend.Outcome{Result: res, Err: err}
	}
	return nil
}

// TestNothingBehindTheBarrierIsApplied: what is queued when a barrier
// stands is split at it; a request behind it is refused, never handed to
// the backend with the requests around it, and the resent failed request
// starts the next call.
func TestNothingBehindTheBarrierIsApplied(t *testing.T) {
	b := newBatchBackend()
	b.gateCall = 2
	b.fail = func(call int) error {
		if call == 1 {
			return &backend.ServerError{Reason: "disk trouble"}
		}
		return nil
	}
	h := newSeqHarness(t, b)
	h.enqueue(3, false)
	if a := h.next(t, 1)[0]; a.Status != ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR {
		t.Fatalf("request 3: %s (%s), want SERVER_ERROR", a.Status, a.Reason)
	}
	// Sequences before the failed one are applied; call 2 holds the queue.
	h.queueBehindGate(b, 0, 1, 2, 4, 3, 5)
	answers := h.next(t, 5)
	for i, want := range []ferryv1.AckStatus{
		ferryv1.AckStatus_ACK_STATUS_OK,           // 1
		ferryv1.AckStatus_ACK_STATUS_OK,           // 2
		ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR, // 4, behind 3
		ferryv1.AckStatus_ACK_STATUS_OK,           // 3, resent
		ferryv1.AckStatus_ACK_STATUS_OK,           // 5
	} {
		if a := answers[i]; a.Status != want {
			t.Errorf("answer %d (request %d): %s (%s), want %s", i, a.RequestId, a.Status, a.Reason, want)
		}
	}
	if got := b.recorded(); got != "[[3] [1] [2] [3 5]]" {
		t.Errorf("backend calls %s, want [[3] [1] [2] [3 5]]: request 4 is behind the barrier", got)
	}
}
