// Package lane delivers a consumer's records to the pusher, one ordered
// lane per tenant. It knows nothing of Kafka or gRPC: it sends through a
// Sender, reads parked records again through a Rereader, and reports what
// it finished through the callbacks of a World, so its logic (requests in
// flight per tenant, retries with backoff and retry-after hints, parking
// of a failing tenant's records, stream breaks) is tested with function
// fakes and a fake clock.
//
// A tenant's requests reach the pusher and are acknowledged in offset
// order; different tenants proceed in parallel. A window bounds the
// records held in memory, all tenants together: adding a record waits for
// room, which is what slows the fetching down.
package lane

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Lanes holds one ordered queue per tenant. Each non-empty lane has one
// goroutine that delivers its items in offset order (deliver.go). A lane
// whose requests are being retried holds up only its own tenant.
type Lanes struct {
	cfg    Config
	world  World
	window *window
	// sequence numbers requests, all tenants together: the pusher refuses
	// what follows a failed request of the same tenant by it.
	sequence atomic.Uint64

	mu      sync.Mutex
	ctx     context.Context
	m       map[string]*lane
	running sync.WaitGroup
}

// lane is one tenant's queue of items not yet taken by its goroutine.
type lane struct {
	tenant string
	queue  []*Item
	held   int // queued items that hold their value; the others are parked
	// retrying is set by the lane's goroutine while its requests fail:
	// the tenant's records beyond its share are parked meanwhile.
	retrying bool
	// failingSince is when the lane's current run of failed rounds began,
	// zero while its requests succeed; read by Retrying.
	failingSince time.Time
	// wakeOnAdd is set by the lane's goroutine when it found the queue
	// empty with one request in flight: it is about to wait for its oldest
	// answer, and the next item queued signals wake so that it is sent
	// without waiting for that answer. Only then does enqueue signal: a
	// lane with more in flight, or failing, costs no channel operation
	// per item. wake (capacity 1) is made the first time it is needed; a
	// signal left over makes the goroutine look at its queue once more
	// for nothing, never miss an item.
	wakeOnAdd bool
	wake      chan struct{}
}

// New returns lanes that deliver with cfg's bounds into w.
func New(cfg Config, w World) *Lanes {
	return &Lanes{
		cfg:    cfg,
		world:  w.withDefaults(),
		window: newWindow(cfg.WindowRecords, cfg.WindowBytes),
		m:      map[string]*lane{},
	}
}

// Start sets the context the lanes' goroutines run under. It outlives the
// fetching, so that a graceful stop can drain what was fetched; Add must
// not be called before Start.
func (ls *Lanes) Start(ctx context.Context) {
	ls.mu.Lock()
	ls.ctx = ctx
	ls.mu.Unlock()
}

// Usage returns the records held in memory and the bytes of their values.
func (ls *Lanes) Usage() (records, bytes int) {
	return ls.window.usage()
}

// Wait returns true once every lane is empty, or false when ctx is done
// first.
func (ls *Lanes) Wait(ctx context.Context) bool {
	done := make(chan struct{})
	go func() { ls.running.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// stopRetrying marks l as no longer retrying: its next records keep their
// values again.
func (ls *Lanes) stopRetrying(l *lane) {
	ls.mu.Lock()
	l.retrying = false
	l.failingSince = time.Time{}
	ls.mu.Unlock()
}

// retire ends l when it is still empty, and reports whether it did: the
// lane's goroutine then returns, and the tenant's next item starts a new
// lane. Items may have arrived since the goroutine last looked.
func (ls *Lanes) retire(l *lane) bool {
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
func (ls *Lanes) abandon(l *lane) {
	ls.mu.Lock()
	delete(ls.m, l.tenant)
	ls.mu.Unlock()
}
