package consumer

import (
	"context"
	"sync"
)

// lanes holds one ordered queue per tenant. Each non-empty lane has one
// goroutine that delivers its items in offset order, keeping up to
// -consumer.max-inflight-per-tenant of them in flight, so a tenant's
// requests reach the pusher in order while tenants proceed in parallel. A
// lane whose request is being retried holds up only its own tenant;
// -consumer.max-uncommitted-records bounds how far the others can get
// ahead of the watermark it holds.
type lanes struct {
	deliver func(context.Context, *lane)

	mu      sync.Mutex
	ctx     context.Context
	m       map[string]*lane
	running sync.WaitGroup
}

// lane is one tenant's queue of items not yet handed to its goroutine.
type lane struct {
	tenant string
	queue  []*item
}

func newLanes(deliver func(context.Context, *lane)) *lanes {
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
	ls.running.Go(func() { ls.deliver(ls.ctx, l) })
}

// pop takes the next item off l, or returns nil when l is empty.
func (ls *lanes) pop(l *lane) *item {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(l.queue) == 0 {
		return nil
	}
	it := l.queue[0]
	l.queue[0] = nil
	l.queue = l.queue[1:]
	return it
}

// retire ends l when it is still empty, and reports whether it did: the
// lane's goroutine then returns, and the tenant's next item starts a new
// lane. Items may have arrived since the goroutine last looked.
func (ls *lanes) retire(l *lane) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(l.queue) > 0 {
		return false
	}
	delete(ls.m, l.tenant)
	return true
}

// abandon forgets l, queued items and all: its goroutine is stopping
// because the consumer is, and what it did not finish is not committed.
func (ls *lanes) abandon(l *lane) {
	ls.mu.Lock()
	delete(ls.m, l.tenant)
	ls.mu.Unlock()
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
