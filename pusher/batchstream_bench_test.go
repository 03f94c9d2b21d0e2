package pusher

import (
	"context"
	"fmt"
	"testing"

	"github.com/ferrylabs/ferry/internal/benchfixture"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/wire"
)

// BenchmarkPushBatchStream is BenchmarkPushStream's many-tenants shape
// (sequenced requests of 10 series, 1,000 tenants round-robin, 64 in
// flight) on a PushBatch stream, with perMessage requests in each message
// as the consumer's writer sends them. An op is one request, as there:
// per=1 against BenchmarkPushStream's series=10/sequenced/tenants=1000
// is the cost of the framing alone, the others what sharing a message
// saves, client and server together (cpu-ns/op).
func BenchmarkPushBatchStream(b *testing.B) {
	for _, per := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("series=10/sequenced/tenants=1000/inflight=64/per=%d", per), func(b *testing.B) {
			benchPushBatchStream(b, 10, 64, 1000, per)
		})
	}
}

func benchPushBatchStream(b *testing.B, series, inflight, tenants, perMessage int) {
	names := make([]string, tenants)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%d", i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := benchClient(b).PushBatch(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		b.Fatal(err)
	}
	value, err := benchRequest(series).WriteRequest.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]wire.PushRequest, perMessage)
	var msg wire.PushBatch
	for i := range reqs {
		reqs[i] = wire.PushRequest{Topic: "ingest", Value: value}
		msg.Requests = append(msg.Requests, &reqs[i])
	}

	slots := make(chan struct{}, inflight)
	recvErr := make(chan error, 1)
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			for _, r := range resp.Responses {
				if r.Status != ferryv1.AckStatus_ACK_STATUS_OK {
					recvErr <- fmt.Errorf("%s: %s", r.Status, r.Reason)
					return
				}
				<-slots
			}
		}
	}()
	b.ReportAllocs()
	start := benchfixture.CPUTime(b)
	var id uint64
	queued := 0
	send := func() {
		msg.Requests = msg.Requests[:queued]
		if err := stream.SendMsg(&msg); err != nil {
			b.Fatal(err)
		}
		queued = 0
	}
	for b.Loop() {
		select {
		case slots <- struct{}{}:
		case err := <-recvErr:
			b.Fatal(err)
		}
		id++
		r := &reqs[queued]
		r.RequestID, r.Sequence, r.Tenant = id, id, names[id%uint64(tenants)]
		queued++
		if queued == perMessage {
			send()
		}
	}
	if queued > 0 {
		send()
	}
	for range inflight {
		select {
		case slots <- struct{}{}:
		case err := <-recvErr:
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(series)*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
	benchfixture.ReportCPU(b, start)
	_ = stream.CloseSend()
}
