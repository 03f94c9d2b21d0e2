package consumer

import (
	"context"
	"sync"
)

// lanes holds one ordered queue per tenant. Each non-empty lane has one
// goroutine that delivers its items one at a time, in offset order, so a
// tenant's requests reach the pusher in order while tenants proceed in
// parallel. A lane whose request is being retried holds up only its own
// tenant; -consumer.max-uncommitted-records bounds how far the others can
// get ahead of the watermark it holds.
type lanes struct {
	deliver func(context.Context, *item)

	mu      sync.Mutex
	ctx     context.Context
	m       map[string]*lane
	running sync.WaitGroup
}

type lane struct {
	tenant string
	queue  []*item
}

func newLanes(deliver func(context.Context, *item)) *lanes {
	return &lanes{deliver: deliver, m: map[string]*lane{}}
}

// start sets the context lane goroutines run under: it outlives the fetch
// loop so that a graceful stop can drain what was fetched.
func (ls *lanes) start(ctx context.Context) {
	ls.mu.Lock()
	ls.ctx = ctx
	ls.mu.Unlock()
}

// enqueue appends it to its tenant's lane, starting the lane if idle.
func (ls *lanes) enqueue(tenant string, it *item) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l, ok := ls.m[tenant]
	if ok {
		l.queue = append(l.queue, it)
		return
	}
	l = &lane{tenant: tenant, queue: []*item{it}}
	ls.m[tenant] = l
	ls.running.Add(1)
	go ls.run(ls.ctx, l)
}

// run delivers a lane's items until it is empty, then retires the lane.
func (ls *lanes) run(ctx context.Context, l *lane) {
	defer ls.running.Done()
	for {
		ls.mu.Lock()
		if len(l.queue) == 0 || ctx.Err() != nil {
			delete(ls.m, l.tenant)
			ls.mu.Unlock()
			return
		}
		it := l.queue[0]
		ls.mu.Unlock()

		ls.deliver(ctx, it)

		ls.mu.Lock()
		l.queue[0] = nil
		l.queue = l.queue[1:]
		ls.mu.Unlock()
	}
}

// wait returns true once every lane is empty, or false when ctx is done
// first.
func (ls *lanes) wait(ctx context.Context) bool {
	done := make(chan struct{})
	go func() { ls.running.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}
