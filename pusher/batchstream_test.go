package pusher

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/proto/wire"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// batchRequest is req as the consumer sends it: its write request encoded.
func batchRequest(t *testing.T, req *ferryv1.PushRequest) *wire.PushRequest {
	t.Helper()
	value, err := req.WriteRequest.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return &wire.PushRequest{RequestID: req.RequestId, Tenant: req.Tenant, Topic: req.Topic,
		Partition: req.Partition, Offset: req.Offset, Value: value, Sequence: req.Sequence}
}

// recvAnswers reads PushBatch answers until it has n, failing the test on
// an answer given twice, and returns them by request ID with the number of
// messages they came in.
func recvAnswers(t *testing.T, stream ferryv1.PusherService_PushBatchClient, n int) (map[uint64]*ferryv1.PushResponse, int) {
	t.Helper()
	out := map[uint64]*ferryv1.PushResponse{}
	messages := 0
	for len(out) < n {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv after %d answers: %v", len(out), err)
		}
		messages++
		for _, resp := range msg.Responses {
			if _, dup := out[resp.RequestId]; dup {
				t.Fatalf("request %d answered twice", resp.RequestId)
			}
			out[resp.RequestId] = resp
		}
	}
	return out, messages
}

// TestPushBatchAnswersEachRequestAlone sends one message whose requests
// meet every fate: applied, refused by the backend as a client error, not
// decodable, failed with a server error that holds back its tenant's later
// requests. Each is answered alone by its ID, in the order they finish:
// the tenant whose first request blocks in the backend does not hold back
// the answers of the others. Then the failed tenant's requests, sent again
// in a second message, are applied in order.
func TestPushBatchAnswersEachRequestAlone(t *testing.T) {
	checkGoroutines(t)
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	failed := false
	order := newOrderBackend(func(tenant string, step int) error {
		switch {
		case tenant == "t1" && step == 2 && !failed:
			failed = true
			return &backend.ServerError{Reason: "disk trouble"}
		case tenant == "refused":
			return backend.NewClientError("refused by the backend")
		}
		return nil
	})
	b := order.backend()
	apply := b.push
	b.push = func(ctx context.Context, tenant string, req *prompb.WriteRequest) (backend.Result, error) {
		if tenant == "slow" {
			<-release
		}
		return apply(ctx, tenant, req)
	}
	h := startServer(t, testConfig(t), b)
	ctx := testContext(t)
	stream, err := h.client.PushBatch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	undecodable := batchRequest(t, sequenced(4, "t2", 1))
	undecodable.Value = []byte{0x0a, 0x05, 0x01} // a series longer than the bytes left
	msg := &wire.PushBatch{Requests: []*wire.PushRequest{
		batchRequest(t, sequenced(1, "slow", 1)),
		batchRequest(t, sequenced(2, "t1", 1)),
		batchRequest(t, sequenced(3, "t1", 2)),
		undecodable,
		batchRequest(t, sequenced(5, "t1", 3)),
		batchRequest(t, sequenced(6, "refused", 1)),
		batchRequest(t, sequenced(7, "t2", 2)),
		batchRequest(t, sequenced(8, "t1", 4)),
	}}
	if err := stream.SendMsg(msg); err != nil {
		t.Fatal(err)
	}
	// Everything but the slow tenant's request is answered while it is
	// still in the backend.
	answers, _ := recvAnswers(t, stream, len(msg.Requests)-1)
	if _, ok := answers[1]; ok {
		t.Fatal("the blocked request was answered")
	}
	unblock()
	last, _ := recvAnswers(t, stream, 1)
	for id, resp := range last {
		answers[id] = resp
	}
	const (
		ok     = ferryv1.AckStatus_ACK_STATUS_OK
		client = ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR
		server = ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR
	)
	want := map[uint64]ferryv1.AckStatus{1: ok, 2: ok, 3: server, 4: client, 5: server, 6: client, 7: ok, 8: server}
	for id, st := range want {
		resp := answers[id]
		if resp == nil || resp.Status != st {
			t.Errorf("request %d answered %v, want %s", id, resp, st)
		}
	}
	if r := answers[4].GetReason(); !strings.Contains(r, "not a remote-write WriteRequest") {
		t.Errorf("the undecodable request's reason is %q", r)
	}
	if r := answers[8].GetReason(); !strings.Contains(r, "an earlier request of this tenant") {
		t.Errorf("t1's request behind the failure: reason %q", r)
	}

	again := &wire.PushBatch{Requests: []*wire.PushRequest{
		batchRequest(t, sequenced(9, "t1", 2)),
		batchRequest(t, sequenced(10, "t1", 3)),
		batchRequest(t, sequenced(11, "t1", 4)),
	}}
	if err := stream.SendMsg(again); err != nil {
		t.Fatal(err)
	}
	answers, _ = recvAnswers(t, stream, len(again.Requests))
	for id, resp := range answers {
		if resp.Status != ok {
			t.Errorf("resent request %d: %s (%s)", id, resp.Status, resp.Reason)
		}
	}
	if got := fmt.Sprint(order.steps("t1")); got != "[1 2 3 4]" {
		t.Errorf("t1 applied %s, want [1 2 3 4]", got)
	}
	if got := fmt.Sprint(order.steps("t2")); got != "[2]" {
		t.Errorf("t2 applied %s, want [2]: its undecodable request alone is refused", got)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err == nil {
		t.Error("the stream went on after the client closed it")
	}
}

// sendRecorder is a stream whose SendMsg records the answers of each
// message, and blocks the first one until unblock is closed.
type sendRecorder struct {
	grpc.ServerStream
	entered  chan struct{}
	unblock  chan struct{}
	messages [][]uint64
}

func (r *sendRecorder) SendMsg(m any) error {
	if len(r.messages) == 0 {
		r.entered <- struct{}{}
		<-r.unblock
	}
	var ids []uint64
	for _, resp := range m.(*ferryv1.PushBatchResponse).Responses {
		ids = append(ids, resp.RequestId)
	}
	r.messages = append(r.messages, ids)
	return nil
}

// TestAnOutboxSendsWhatIsReady checks that the first answer goes out
// alone, without waiting for more, and that the answers that came while it
// was being sent share the next message, in the order they came, sent by
// the goroutine that sent the first.
func TestAnOutboxSendsWhatIsReady(t *testing.T) {
	ctx := testContext(t)
	rec := &sendRecorder{entered: make(chan struct{}), unblock: make(chan struct{})}
	b := newBatchOutbox(rec, nil)
	first := make(chan struct{})
	go func() {
		b.send(answers(1))
		close(first)
	}()
	await(ctx, t, "the first message", rec.entered)
	for id := uint64(2); id <= 10; id++ {
		b.send(answers(id)) // queued: returns at once
	}
	close(rec.unblock)
	await(ctx, t, "the first send to return", first)
	if got, want := fmt.Sprint(rec.messages), "[[1] [2 3 4 5 6 7 8 9 10]]"; got != want {
		t.Errorf("messages %s, want %s", got, want)
	}
}

// answers returns requests and their answers for the IDs, as a sequencer
// hands them to a stream's sendFunc.
func answers(ids ...uint64) ([]received, []answered) {
	rs := make([]received, len(ids))
	as := make([]answered, len(ids))
	for i, id := range ids {
		as[i].resp = &ferryv1.PushResponse{RequestId: id}
	}
	return rs, as
}

// TestAnOutboxSendsAnswersGivenTogetherInOneMessage: the answers of one
// call go out in one message when no other is being sent, and a call with
// more than a message's bound is split at the bound.
func TestAnOutboxSendsAnswersGivenTogetherInOneMessage(t *testing.T) {
	rec := &sendRecorder{entered: make(chan struct{}, 1), unblock: make(chan struct{})}
	close(rec.unblock)
	b := newBatchOutbox(rec, nil)
	b.send(answers(1, 2, 3))
	if got, want := fmt.Sprint(rec.messages), "[[1 2 3]]"; got != want {
		t.Errorf("messages %s, want %s", got, want)
	}
	ids := make([]uint64, maxAnswersPerMessage+1)
	for i := range ids {
		ids[i] = uint64(10 + i)
	}
	b.send(answers(ids...))
	if n := len(rec.messages); n != 3 || len(rec.messages[1]) != maxAnswersPerMessage || len(rec.messages[2]) != 1 {
		t.Errorf("%d messages of %d answers: want the bound's %d then 1", n, len(rec.messages[1]), maxAnswersPerMessage)
	}
}

// recvMessages reads n PushBatch messages and returns the request IDs of
// each.
func recvMessages(t *testing.T, stream ferryv1.PusherService_PushBatchClient, n int) [][]uint64 {
	t.Helper()
	var out [][]uint64
	for range n {
		msg, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv after %d messages: %v", len(out), err)
		}
		var ids []uint64
		for _, resp := range msg.Responses {
			ids = append(ids, resp.RequestId)
		}
		out = append(out, ids)
	}
	return out
}

// TestAnApplyCallsAnswersShareAMessage: requests of a tenant queued behind
// one being applied are applied in one call, and their answers come back
// in one message of an otherwise idle stream (each came alone before).
func TestAnApplyCallsAnswersShareAMessage(t *testing.T) {
	checkGoroutines(t)
	b := newBatchBackend()
	t.Cleanup(func() {
		select {
		case <-b.gate:
		default:
			close(b.gate)
		}
	})
	h := startServer(t, testConfig(t), b)
	ctx := testContext(t)
	stream, err := h.client.PushBatch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(reqs ...*ferryv1.PushRequest) {
		t.Helper()
		msg := &wire.PushBatch{}
		for _, r := range reqs {
			msg.Requests = append(msg.Requests, batchRequest(t, r))
		}
		if err := stream.SendMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	send(sequenced(1, "t1", 1))
	await(ctx, t, "the first apply call", b.started)
	// The stream's requests are queued in the order read: once the other
	// tenant's is answered, t1's three are queued behind the first.
	send(sequenced(2, "t1", 2), sequenced(3, "t1", 3), sequenced(4, "t1", 4), sequenced(5, "other", 1))
	if got := fmt.Sprint(recvMessages(t, stream, 1)); got != "[[5]]" {
		t.Fatalf("first message %s, want [[5]]", got)
	}
	close(b.gate)
	// The first answer may share the message of the others when it was
	// queued behind the other tenant's message, still being sent.
	msgs := recvMessages(t, stream, 1)
	if fmt.Sprint(msgs) == "[[1]]" {
		msgs = append(msgs, recvMessages(t, stream, 1)...)
	}
	if got := fmt.Sprint(msgs); got != "[[1] [2 3 4]]" && got != "[[1 2 3 4]]" {
		t.Errorf("messages %s, want [[1] [2 3 4]]", got)
	}
	if got := b.recorded(); got != "[[1] [1] [2 3 4]]" {
		t.Errorf("backend calls %s, want [[1] [1] [2 3 4]]", got)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err == nil {
		t.Error("the stream went on after the client closed it")
	}
}
