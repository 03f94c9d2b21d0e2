package tsdbstore

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/prometheus/tsdb"

	"github.com/ferrylabs/ferry/pusher/backend"
)

// registry is the set of open TSDBs (a tenant's, or the shared one) and
// their lifecycle: a TSDB opens on first use and closes after
// -storage.idle-timeout without one. Every use holds a reference
// (acquire, release), and closing skips referenced TSDBs, so a TSDB is
// never closed under an in-flight push, Sync or Querier. It admits new
// tenants under -pusher.max-tenants, and tracks the states durability
// sets on a TSDB (broken, recovering) that decide whether it may close.
//
// How a TSDB opens and closes is not its business: open and close are the
// Store's (tenantdb.go), called outside mu.
//
//	acquire ──▶ opening ──▶ open ◀──▶ referenced
//	                         │ idle, or last query ended
//	                         ▼
//	                      closing ──▶ gone (or open again, when its
//	                                  storage was lost: durability
//	                                  recovers it in place)
type registry struct {
	cfg     *Config
	metrics *metrics
	// open opens the TSDB t names; close closes one the registry retires
	// ("idle" or "query"), whose closing channel it set, and ends with
	// forget or keep.
	open  func(t *tenantDB) (*tsdb.DB, error)
	close func(t *tenantDB, reason string)

	mu     sync.Mutex
	idle   *sync.Cond // signalled on mu when a TSDB's last reference is released
	byID   map[string]*tenantDB
	closed bool
	// broken counts TSDBs whose storage was lost and is not recovered
	// (recover.go); Sync fails while it is not 0.
	broken int

	// background counts recoveries, query-only closes, sync rounds and
	// the shared TSDB's opening at start, which shut waits for.
	background sync.WaitGroup
	// paths checks that a tenant's path is free for its directory.
	paths *tenantPaths
	// active admits the shared tenancy's tenants under
	// -pusher.max-tenants (shared.go).
	active *activeTenants

	stop     chan struct{}
	loopDone chan struct{}
}

func newRegistry(cfg *Config, logger *slog.Logger, m *metrics) *registry {
	r := &registry{
		cfg: cfg, metrics: m,
		paths:    &tenantPaths{logger: logger},
		active:   &activeTenants{cfg: cfg, metrics: m, last: make(map[string]time.Time)},
		byID:     make(map[string]*tenantDB),
		stop:     make(chan struct{}),
		loopDone: make(chan struct{}),
	}
	r.idle = sync.NewCond(&r.mu)
	return r
}

// acquire returns the TSDB with the ID, open, with a reference the caller
// must release. With create false it returns nil, nil for a TSDB that is
// not on disk, so that reads never create directories.
func (r *registry) acquire(ctx context.Context, id string, create bool) (*tenantDB, error) {
	for {
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return nil, backend.ErrShuttingDown
		}
		t := r.byID[id]
		if t == nil {
			return r.openNew(id, create)
		}
		if t.closing != nil {
			closing := t.closing
			r.mu.Unlock()
			// Reopening before the old DB released its directory lock
			// would fail; wait for the close, then open afresh.
			select {
			case <-closing:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		t.refs++
		if create {
			t.queryOnly = false
		}
		r.mu.Unlock()
		select {
		case <-t.ready:
		case <-ctx.Done():
			r.release(t)
			return nil, ctx.Err()
		}
		if t.err != nil {
			r.release(t)
			return nil, t.err
		}
		return t, nil
	}
}

// openNew is acquire of a TSDB not open yet; r.mu is held, and released.
func (r *registry) openNew(id string, create bool) (*tenantDB, error) {
	dir := filepath.Join(r.cfg.Path, id)
	if !create && !tenantExists(dir) {
		r.mu.Unlock()
		return nil, nil
	}
	if create {
		if err := r.admit(id, dir); err != nil {
			r.mu.Unlock()
			return nil, err
		}
	}
	t := &tenantDB{id: id, dir: dir, ready: make(chan struct{}), refs: 1, syncedFrom: map[string]int{}, queryOnly: !create}
	r.byID[id] = t
	r.mu.Unlock()
	// Opening replays the WAL and may take long; other tenants must not
	// wait for it, so it runs outside r.mu.
	db, err := r.open(t)
	r.mu.Lock()
	t.db, t.err = db, err
	t.lastUsed = time.Now()
	if err != nil {
		delete(r.byID, id)
		t.refs--
	}
	close(t.ready)
	r.idle.Broadcast()
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return t, nil
}

// acquireForWrite returns, with a reference, the open TSDB the tenant's
// writes go to, creating it if needed; in the shared tenancy it first
// admits the tenant under -pusher.max-tenants.
func (r *registry) acquireForWrite(ctx context.Context, tenant string) (*tenantDB, error) {
	if r.cfg.shared() {
		if err := r.active.admit(tenant); err != nil {
			return nil, err
		}
	}
	return r.acquire(ctx, r.cfg.dbID(tenant), true)
}

// release drops a reference taken by acquire and marks the TSDB used
// now, which postpones its idle close.
func (r *registry) release(t *tenantDB) {
	r.mu.Lock()
	t.refs--
	t.lastUsed = time.Now()
	if t.refs == 0 {
		r.idle.Broadcast()
		if t.queryOnly && t.closing == nil && t.db != nil && !t.broken.Load() && !r.closed && t.id != sharedDirName {
			// Opened for reads only: close it now rather than holding
			// its memory and descriptors for the idle timeout. Not the
			// shared TSDB: reads cannot open more than that one, and
			// opening it replays every tenant's WAL, which each read of
			// an idle store would otherwise pay again.
			t.closing = make(chan struct{})
			r.background.Add(1)
			go func() {
				defer r.background.Done()
				r.close(t, "query")
			}()
		}
	}
	r.mu.Unlock()
}

// peekOpen returns the TSDB with the ID with a reference, if it is open,
// without marking it used: looking at it must not keep it from closing
// when idle. unpeek drops the reference.
func (r *registry) peekOpen(id string) *tenantDB {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.byID[id]
	if t == nil || t.db == nil || t.closing != nil {
		return nil
	}
	t.refs++
	return t
}

// unpeek drops a reference taken by peekOpen.
func (r *registry) unpeek(t *tenantDB) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t.refs--
	if t.refs == 0 {
		r.idle.Broadcast()
	}
}

// admit checks that a tenant not open yet may be opened for writing: its
// path is not taken by a file, and -pusher.max-tenants is not reached.
// r.mu is held.
func (r *registry) admit(id, dir string) error {
	if err := r.paths.check(id, dir); err != nil {
		return err
	}
	// The shared TSDB is one; its tenants are admitted by admitShared.
	if r.cfg.MaxTenants <= 0 || r.cfg.shared() {
		return nil
	}
	open := 0
	for _, t := range r.byID {
		if !t.queryOnly {
			open++
		}
	}
	if open >= r.cfg.MaxTenants {
		return capacityError(r.metrics, r.cfg, capacityTenantLimit,
			fmt.Errorf("%w: %d tenants are open, the limit is %d (-pusher.max-tenants); retry once one has been idle for -storage.idle-timeout", errTenantLimit, open, r.cfg.MaxTenants))
	}
	return nil
}

// capacityError is the server error for a write refused for lack of room
// rather than for its data (see errTenantLimit), counted by cause. Room
// appears when a tenant closes for idleness, which the idle loop checks
// every idleCheckInterval: the sender's retry hint.
func capacityError(m *metrics, cfg *Config, cause string, err error) error {
	m.capacityRefusals.WithLabelValues(cause).Inc()
	return &backend.ServerError{Reason: err.Error(), RetryAfter: cfg.idleCheckInterval(), Cause: err}
}

// forget removes a TSDB that close closed.
func (r *registry) forget(t *tenantDB) {
	r.mu.Lock()
	delete(r.byID, t.id)
	close(t.closing)
	r.mu.Unlock()
}

// keep puts a TSDB that close did not close back in use.
func (r *registry) keep(t *tenantDB) {
	r.mu.Lock()
	close(t.closing)
	t.closing = nil
	r.mu.Unlock()
}

// idleCheckInterval is how often the idle loop looks for idle tenants:
// a few times per timeout bounds how long past the timeout a tenant stays
// open, at the cost of scanning the tenant map. Without an idle timeout
// no tenant closes by itself; a minute is then the retry hint of a write
// refused at the tenant limit.
func (c *Config) idleCheckInterval() time.Duration {
	if c.IdleTimeout <= 0 {
		return time.Minute
	}
	return min(max(c.IdleTimeout/4, 10*time.Millisecond), time.Minute)
}

// idleLoop closes TSDBs idle for longer than the idle timeout until shut.
func (r *registry) idleLoop() {
	defer close(r.loopDone)
	if r.cfg.IdleTimeout <= 0 {
		<-r.stop
		return
	}
	ticker := time.NewTicker(r.cfg.idleCheckInterval())
	defer ticker.Stop()
	for {
		select {
		case <-r.stop:
			return
		case now := <-ticker.C:
			r.closeIdle(now)
		}
	}
}

// closeIdle closes every TSDB that has no reference and was last used
// more than the idle timeout before now.
func (r *registry) closeIdle(now time.Time) {
	r.active.forgetIdle(now)
	var victims []*tenantDB
	r.mu.Lock()
	for _, t := range r.byID {
		// A broken tenant's head holds data its recovery needs.
		if t.refs == 0 && t.closing == nil && t.db != nil && !t.broken.Load() && now.Sub(t.lastUsed) > r.cfg.IdleTimeout {
			t.closing = make(chan struct{})
			victims = append(victims, t)
		}
	}
	r.mu.Unlock()
	for _, t := range victims {
		r.close(t, "idle")
	}
}

// spawn runs f in the background unless the registry was shut, which
// waits for it.
func (r *registry) spawn(f func()) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return backend.ErrShuttingDown
	}
	r.background.Add(1)
	go func() {
		defer r.background.Done()
		f()
	}()
	return nil
}

// isClosed reports whether shut was called.
func (r *registry) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// shut refuses every new use, stops the idle loop, waits for the
// background work and for every reference to be released, and hands the
// TSDBs to the caller to close. false when it was shut already.
func (r *registry) shut() ([]*tenantDB, bool) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, false
	}
	r.closed = true
	close(r.stop)
	r.mu.Unlock()
	<-r.loopDone // No idle close is running or will start.
	r.background.Wait()

	r.mu.Lock()
	defer r.mu.Unlock()
	for r.busy() {
		r.idle.Wait()
	}
	tenants := slices.Collect(maps.Values(r.byID))
	clear(r.byID)
	return tenants, true
}

// busy reports whether any TSDB is referenced; r.mu must be held.
func (r *registry) busy() bool {
	for _, t := range r.byID {
		if t.refs > 0 {
			return true
		}
	}
	return false
}

// isOpen reports whether the TSDB with the ID is open or opening.
func (r *registry) isOpen(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.byID[id]
	return ok
}

// eachOpen calls f for every open TSDB not being closed, under r.mu: f
// must not call the registry.
func (r *registry) eachOpen(f func(t *tenantDB)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.byID {
		if t.db != nil && t.closing == nil {
			f(t)
		}
	}
}

// empty reports whether no TSDB is open or opening.
func (r *registry) empty() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID) == 0
}
