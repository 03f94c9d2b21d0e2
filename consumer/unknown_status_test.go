package consumer

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/proto/codec"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

// statusPusher is a push service over loopback that answers every request
// with the status in answer, whatever it is.
type statusPusher struct {
	ferryv1.UnimplementedPusherServiceServer
	answer   atomic.Int32
	attempts atomic.Int64
}

func (p *statusPusher) Push(stream ferryv1.PusherService_PushServer) error {
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil //nolint:nilerr // the stream ended: nothing to answer
		}
		p.attempts.Add(1)
		resp := &ferryv1.PushResponse{RequestId: req.RequestId, Status: ferryv1.AckStatus(p.answer.Load()), Reason: "from a stub"}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

func (p *statusPusher) Sync(context.Context, *ferryv1.SyncRequest) (*ferryv1.SyncResponse, error) {
	return &ferryv1.SyncResponse{}, nil
}

func serveStatusPusher(t *testing.T, p *statusPusher) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(codec.ServerOption())
	ferryv1.RegisterPusherServiceServer(g, p)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// TestUnknownStatusIsRetriedNeverSkipped has the pusher answer statuses
// this consumer does not know (UNSPECIFIED and 99): the record must be
// retried, never skipped and never committed past, until an OK comes.
func TestUnknownStatusIsRetriedNeverSkipped(t *testing.T) {
	for _, st := range []ferryv1.AckStatus{ferryv1.AckStatus_ACK_STATUS_UNSPECIFIED, ferryv1.AckStatus(99)} {
		t.Run(st.String(), func(t *testing.T) {
			t.Parallel()
			b := kafkatest.Current(t)
			topic := b.CreateTopic(t, 1)
			p := &statusPusher{}
			p.answer.Store(int32(st))
			cfg := testConfig(b.Addrs(), topic, "0", serveStatusPusher(t, p))
			produceRecords(t, manualClient(t, b), &kgo.Record{Topic: topic, Key: []byte("tenant-1"), Value: testShape.Marshal("tenant-1", 0)})
			rc := startConsumer(t, cfg)

			waitFor(t, 30*time.Second, "three attempts or a skip", func() bool {
				return p.attempts.Load() >= 3 || rc.stats.skipped.Load() > 0
			})
			// Several commit intervals with the record unacknowledged.
			time.Sleep(5 * cfg.CommitInterval)
			if got := b.CommittedOffsets(t, cfg.ConsumerGroup, topic)[0]; got > 0 {
				t.Fatalf("committed offset %d past a record answered %s", got, st)
			}
			if n := rc.stats.skipped.Load(); n != 0 {
				t.Fatalf("%d records skipped after an answer %s", n, st)
			}
			p.answer.Store(int32(ferryv1.AckStatus_ACK_STATUS_OK))
			waitCommitted(t, b, cfg.ConsumerGroup, topic, 30*time.Second)
			if n := rc.stats.skipped.Load(); n != 0 {
				t.Errorf("%d records skipped", n)
			}
		})
	}
}
