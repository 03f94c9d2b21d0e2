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
	held   int // queued items that hold their value (not parked)
	// retrying is set by the lane's goroutine while its requests fail:
	// the tenant's records beyond its share are parked meanwhile.
	retrying bool
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
	if !ok {
		l = &lane{tenant: tenant}
		ls.m[tenant] = l
		ls.running.Go(func() { ls.deliver(ls.ctx, l) })
	}
	l.queue = append(l.queue, it)
	if !it.parked {
		l.held++
	}
}

// crowded reports whether tenant's lane is retrying and already holds
// share records in memory: its next record is then parked.
func (ls *lanes) crowded(tenant string, share int) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l, ok := ls.m[tenant]
	return ok && l.retrying && l.held >= share
}

// startRetrying marks l as retrying and parks its queued records beyond
// the first share that are decoded (a decoder may still be reading the
// others). It returns them, so that their window room is given back.
func (ls *lanes) startRetrying(l *lane, share int) []*item {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l.retrying = true
	var parked []*item
	kept := 0
	for _, it := range l.queue {
		switch {
		case it.parked:
		case kept < share || !isClosed(it.decoded):
			kept++
		default:
			it.park()
			l.held--
			parked = append(parked, it)
		}
	}
	return parked
}

// stopRetrying marks l as no longer retrying: its next records keep their
// values again.
func (ls *lanes) stopRetrying(l *lane) {
	ls.mu.Lock()
	l.retrying = false
	ls.mu.Unlock()
}

// popParked takes the parked items of partition p at the head of l, up to
// n of them and bytes bytes of values.
func (ls *lanes) popParked(l *lane, p int32, n, bytes int) []*item {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var out []*item
	for len(out) < n && len(l.queue) > 0 && l.queue[0].parked && l.queue[0].partition == p && l.queue[0].size <= bytes {
		bytes -= l.queue[0].size
		out = append(out, l.popHead())
	}
	return out
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// pop takes the next item off l, or returns nil when l is empty.
func (ls *lanes) pop(l *lane) *item {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(l.queue) == 0 {
		return nil
	}
	return l.popHead()
}

// popHead takes the first item off a non-empty queue. The caller holds
// the lanes' lock.
func (l *lane) popHead() *item {
	it := l.queue[0]
	l.queue[0] = nil
	l.queue = l.queue[1:]
	if !it.parked {
		l.held--
	}
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
