package tsdbstore

import (
	"context"
	"sync"
	"sync/atomic"
)

// syncRounds coalesces concurrent Syncs into rounds. A round covers what was
// committed before it started, so a caller may only be served by a round
// that starts after its call began: one arriving while a round runs waits
// for the next. The rounds run on their own goroutine, so a caller whose
// context ends leaves without cancelling the round for the others.
type syncRounds struct {
	// run is one round: it makes durable what r covers.
	run func(r *syncRound) (synced int, err error)
	// spawn runs f on its own goroutine, or fails when the store is
	// closing (registry.spawn).
	spawn func(f func()) error

	mu sync.Mutex
	// current is the running round; nil when none runs.
	current *syncRound
	// next is the round the callers that arrived during the current one
	// wait for; nil when none did. It starts when current ends.
	next *syncRound
	// started counts the rounds started, for tests.
	started atomic.Int64
}

// syncRound is one pass over the open tenants; its result is set before
// done is closed.
type syncRound struct {
	done    chan struct{}
	callers int // guarded by syncRounds.mu; for tests
	// all, or else tenants, is what the round syncs: the union of what its
	// callers asked for. Guarded by syncRounds.mu while callers join; read
	// only once the round runs, when no caller joins it any more.
	all     bool
	tenants map[string]struct{}
	synced  int
	err     error
}

// ask adds what a caller needs durable to what r syncs: tenants, or every
// tenant when tenants is empty.
func (r *syncRound) ask(tenants []string) {
	switch {
	case r.all:
	case len(tenants) == 0:
		r.all, r.tenants = true, nil
	default:
		if r.tenants == nil {
			r.tenants = make(map[string]struct{}, len(tenants))
		}
		for _, t := range tenants {
			r.tenants[t] = struct{}{}
		}
	}
}

// covers reports whether r syncs tenant.
func (r *syncRound) covers(tenant string) bool {
	if r.all {
		return true
	}
	_, ok := r.tenants[tenant]
	return ok
}

// await waits for a round that started after the call and covers
// tenants, and returns its result.
func (rs *syncRounds) await(ctx context.Context, tenants []string) (int, error) {
	r, err := rs.join(tenants)
	if err != nil {
		return 0, err
	}
	select {
	case <-r.done:
		return r.synced, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// join returns the round that will serve a caller arriving now with
// tenants to sync: the next one when a round runs (the running one may
// have passed tenants the caller committed to, or not cover them at all),
// else a new one, started at once.
func (rs *syncRounds) join(tenants []string) (*syncRound, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.current != nil {
		if rs.next == nil {
			rs.next = &syncRound{done: make(chan struct{})}
		}
		rs.next.callers++
		rs.next.ask(tenants)
		return rs.next, nil
	}
	r := &syncRound{done: make(chan struct{}), callers: 1}
	r.ask(tenants)
	// The rounds' goroutine takes rs.mu before it looks at current, so
	// it finds r there even if r is done before join returns.
	if err := rs.spawn(func() { rs.runFrom(r) }); err != nil {
		return nil, err
	}
	rs.current = r
	return r, nil
}

// runFrom runs r, then the rounds callers queued meanwhile, until none is
// waiting.
func (rs *syncRounds) runFrom(r *syncRound) {
	for r != nil {
		rs.started.Add(1)
		r.synced, r.err = rs.run(r)
		close(r.done)
		rs.mu.Lock()
		r, rs.next = rs.next, nil
		rs.current = r
		rs.mu.Unlock()
	}
}
