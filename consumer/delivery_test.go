package consumer

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
	"github.com/ferrylabs/ferry/pusher/pushertest"
)

// TestLaneKeepsItsShareOfATenantsRequestsInFlight holds a tenant's first
// request in the backend: the lane must have exactly
// -consumer.max-inflight-per-tenant requests on the stream meanwhile, and
// deliver everything in order once it is released.
//
// The pusher is reachable only once every record is fetched. A lane with
// more than one request in flight that finds its queue empty waits for its
// oldest answer before it sends more (see Lanes.deliver), and that answer
// is held here: with the pusher reachable from the start, a lane that
// outran the fetching of its records would stop short of its share.
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
			addr := startPusher(t, pushertest.BackendFunc{PushFunc: func(_ context.Context, _ string, req *prompb.WriteRequest) (backend.Result, error) {
				step := int(req.Timeseries[0].Samples[0].Value)
				if step == 0 {
					<-release
				}
				mu.Lock()
				steps = append(steps, step)
				mu.Unlock()
				return backend.Result{Accepted: backend.Count(req)}, nil
			}})
			reachable := make(chan struct{})
			cfg := testConfig(b.Addrs(), topic, "0", gatedAddr(t, addr, reachable))
			cfg.MaxInflightPerTenant = share
			c := startConsumer(t, cfg)
			waitFor(t, 30*time.Second, "every record fetched", func() bool { return c.Stats().Inflight == records })
			close(reachable)

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

// gatedAddr returns an address whose connections are forwarded to addr
// once open is closed. Until then they are accepted and wait, unanswered:
// the pusher is unreachable, without its port being given up for another
// listener to take.
func gatedAddr(t *testing.T, addr string, open <-chan struct{}) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	closed := false
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			_ = c.Close()
			return false
		}
		conns = append(conns, c)
		return true
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		_ = lis.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			down, err := lis.Accept()
			if err != nil || !track(down) {
				return
			}
			wg.Go(func() {
				select {
				case <-open:
				case <-stop:
					return // the cleanup closes down
				}
				up, err := net.Dial("tcp", addr)
				if err != nil || !track(up) {
					_ = down.Close()
					return
				}
				// Each direction closes the other connection when it
				// ends, which ends the other direction too.
				wg.Go(func() { _, _ = io.Copy(up, down); _ = up.Close() })
				_, _ = io.Copy(down, up)
				_ = down.Close()
			})
		}
	})
	return lis.Addr().String()
}
