package consumer

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher"
	"github.com/ferrylabs/ferry/pusher/pushertest"
)

// TestLaneKeepsItsShareOfATenantsRequestsInFlight holds a tenant's first
// request in the backend: the lane must have exactly
// -consumer.max-inflight-per-tenant requests on the stream meanwhile, and
// deliver everything in order once it is released.
func TestLaneKeepsItsShareOfATenantsRequestsInFlight(t *testing.T) {
	t.Parallel()
	for _, share := range []int{1, 4, 16} {
		t.Run(fmt.Sprintf("share=%d", share), func(t *testing.T) {
			t.Parallel()
			const records = 40
			b := kafkatest.Current(t)
			topic := b.CreateTopic(t, 1)
			produce(t, manualClient(t, b), topic, 1, 1, 0, records)

			release := make(chan struct{})
			var once sync.Once
			defer once.Do(func() { close(release) })
			var mu sync.Mutex
			var steps []int
			addr := startPusher(t, pushertest.BackendFunc{PushFunc: func(_ context.Context, _ string, req *prompb.WriteRequest) (pusher.Result, error) {
				step := int(req.Timeseries[0].Samples[0].Value)
				if step == 0 {
					<-release
				}
				mu.Lock()
				steps = append(steps, step)
				mu.Unlock()
				return pusher.Result{Accepted: pusher.Count(req)}, nil
			}})
			cfg := testConfig(b.Addrs(), topic, "0", addr)
			cfg.MaxInflightPerTenant = share
			c := startConsumer(t, cfg)

			waitFor(t, 30*time.Second, fmt.Sprintf("%d requests in flight", share), func() bool { return c.sender.pending() >= share })
			time.Sleep(200 * time.Millisecond) // room to overshoot, if the lane would
			if got := c.sender.pending(); got != share {
				t.Errorf("%d requests in flight while the first is held, want %d", got, share)
			}
			once.Do(func() { close(release) })
			waitCommitted(t, b, cfg.ConsumerGroup, topic, 30*time.Second)
			mu.Lock()
			defer mu.Unlock()
			checkSteps(t, map[string][]int{"tenant-0": steps}, 1, records, nil)
		})
	}
}
