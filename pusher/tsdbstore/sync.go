package tsdbstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Durability: Sync makes every sample pushed before it durable by fsyncing
// each open tenant's write logs, which is what lets the consumer commit
// Kafka offsets after it.
//
// Every consumer calls Sync about once a second, and with many tenants one
// pass over them takes a while, so the Syncs are group-committed: a pass
// (a round) serves every caller that arrived before it started, and callers
// arriving while a round runs share the next one. The round fsyncs the
// tenants in parallel, which lets the filesystem's journal commit many
// fsyncs at once. With -storage.sync-method=syncfs a round replaces the
// fsyncs by one syncfs(2) of the storage root's filesystem (syncfs.go).
//
// Here: Sync and SyncTenants, the rounds that serve them (syncRounds), a
// round's pass over the open tenants (syncOpenTenants; a tenant's own
// sync is wal.go's), and the failed writebacks that fail every Sync.

// Sync makes everything committed before the call durable: for every open
// tenant it fsyncs the WAL (and out-of-order WBL) segments written since the
// tenant's previous Sync, and their directories when they gained a segment.
// It returns the number of tenants synced by the round that served the
// call, which concurrent callers share. With syncfs, one syncfs(2) takes
// the place of those fsyncs (syncfs.go).
//
// The TSDB writes each committed record to its segment file before Commit
// returns (it buffers at most the unfinished page, and flushes that at the
// end of every commit), so the data is in the kernel's page cache and only
// the fsync is missing. The TSDB offers no public API for that fsync (the
// head's *wlog.WL is unexported and WL.Sync is documented as test-only), so
// Sync opens the segment files itself: fsync(2) flushes a file's dirty pages
// whichever descriptor it is called on. Segments before the one current at
// the previous Sync were complete then and have been fsynced already;
// segments removed concurrently by a WAL truncation have their data in a
// checkpoint the TSDB fsynced before removing them. Tenants closed by the
// idle timeout were fsynced by their close, which Sync waits for.
func (s *Store) Sync(ctx context.Context) (int, error) {
	return s.durable.sync(ctx, nil)
}

// SyncTenants is Sync for the named tenants only (backend.TenantSyncer):
// the round that serves the call fsyncs their write logs and those of the
// tenants its other callers named, not every open tenant'd. Empty tenants
// syncs every tenant.
func (s *Store) SyncTenants(ctx context.Context, tenants []string) (int, error) {
	return s.durable.sync(ctx, tenants)
}

// sync makes what was committed for tenants (every tenant when empty)
// before the call durable.
func (d *durability) sync(ctx context.Context, tenants []string) (int, error) {
	if d.cfg.shared() {
		// Every tenant is in the one TSDB, and its WAL is synced whole.
		tenants = nil
	}
	start := time.Now()
	synced, err := d.awaitRound(ctx, tenants)
	d.metrics.syncDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		d.metrics.syncFailures.Inc()
		return synced, requestError("sync", err)
	}
	return synced, nil
}

// awaitRound waits for a round that started after the call and covers
// tenants, and returns its result.
func (d *durability) awaitRound(ctx context.Context, tenants []string) (int, error) {
	if err := ctx.Err(); err != nil {
		if !d.tenants.empty() {
			return 0, err
		}
		// No tenant is open: the round only persists the metadata, so
		// there is nothing worth cancelling.
		ctx = context.WithoutCancel(ctx)
	}
	return d.rounds.await(ctx, tenants)
}

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

// syncWorkers is how many tenants a round fsyncs at once.
func (d *durability) syncWorkers() int {
	if d.cfg.SyncConcurrency > 0 {
		return d.cfg.SyncConcurrency
	}
	return DefaultSyncConcurrency
}

// syncOpenTenants is round r: it syncs every open tenant r covers, in
// parallel (syncTenant, wal.go), and waits for those being closed.
func (d *durability) syncOpenTenants(r *syncRound) (int, error) {
	open, closing, err := d.tenants.holdOpen(r.all, r.tenants)
	if err != nil {
		return 0, err
	}

	syncfs := d.syncfsRoot != nil
	var (
		next    atomic.Int64 // index of the next tenant to take
		synced  atomic.Int64
		mu      sync.Mutex // guards errs and pending
		errs    []error
		pending []pendingTenant
		wg      sync.WaitGroup
	)
	for range min(d.syncWorkers(), len(open)) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(open)); i = next.Add(1) - 1 {
				t := open[i]
				st, did, err := d.syncTenant(t, syncfs)
				if st != nil {
					// Released once the syncfs decided its fate: a
					// recovery or close must not change its state
					// meanwhile.
					mu.Lock()
					pending = append(pending, pendingTenant{t, st})
					mu.Unlock()
					continue
				}
				d.tenants.release(t)
				if err != nil {
					// Each tenant's error is its own: a lost one is
					// recovered, one that failed to write back is
					// failed for good, the others are still synced.
					switch {
					case errors.Is(err, errStorageLost):
						d.startRecovery(t, err)
					case errors.Is(err, errWriteback):
						d.failWriteback(t.id, err)
					}
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				} else if did {
					synced.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if len(pending) > 0 {
		if err := d.syncfsPending(pending); err != nil {
			errs = append(errs, err)
		} else {
			synced.Add(int64(len(pending)))
		}
	}
	if err := d.persistMetadata(); err != nil {
		errs = append(errs, err)
	}
	// Callers leave on their own context; the round has none, and a close
	// ends by itself.
	for _, ch := range closing {
		<-ch
	}
	// A tenant whose storage was lost holds acknowledged data in memory
	// only until its recovery wrote it anew: nothing may be committed
	// before that.
	if broken := d.tenants.brokenCount(); broken > 0 {
		errs = append(errs, fmt.Errorf("%w: %d tenant(s) not recovered yet", errStorageLost, broken))
	}
	if err := d.writebackFailures(); err != nil {
		errs = append(errs, err)
	}
	return int(synced.Load()), errors.Join(errs...)
}

// A failed writeback fails every Sync. A failed fsync cannot be retried. When the kernel fails to write a dirty
// page back it reports the error once, to the fsync that comes next (or to
// each descriptor opened before the failure), and marks the page clean:
// the data is dropped from the page cache and a later fsync of the same
// file returns success without writing it. So after a failed fsync of a
// tenant's WAL, what it acknowledged since its last successful Sync may be
// missing on disk for good, and no later Sync may say otherwise, or the
// consumers would commit offsets past samples that exist nowhere.
//
// The tenant is therefore failed until the pusher restarts: its pushes are
// answered SERVER_ERROR and every Sync fails, so no consumer commits
// anything after its last successful Sync. A restart replays what the WAL
// holds and the consumers send everything after their committed offsets
// again, which covers all that may have been lost. The same holds when
// closing an idle tenant fails with commits not yet synced: its head, the
// only other copy, is gone with the close.

// errWriteback marks the failure of fsync(2) on a tenant's storage, or of
// closing a tenant's TSDB (which fsyncs) before its commits were synced.
var errWriteback = errors.New("writing the tenant's storage back to disk failed: what it acknowledged since the last successful Sync may not be on disk; " +
	"the tenant's pushes and every Sync fail until the pusher is restarted, and the consumers then send those records again")

// writebackError wraps the error of an fsync(2) call as errWriteback. An
// error opening the file is not one: it says nothing of the data.
func writebackError(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", errWriteback, err)
}

// failWriteback fails the tenant for good (see above): it logs the failure
// once and counts it. cause is kept as an errWriteback.
func (d *durability) failWriteback(tenant string, cause error) {
	if !errors.Is(cause, errWriteback) {
		cause = writebackError(cause)
	}
	d.failedMu.Lock()
	_, known := d.writebackFailed[tenant]
	if !known {
		if d.writebackFailed == nil {
			d.writebackFailed = map[string]error{}
		}
		d.writebackFailed[tenant] = cause
	}
	d.failedMu.Unlock()
	if known {
		return
	}
	d.metrics.writebackFailures.Inc()
	d.logger.Error("tenant storage failed to write back: failing the tenant's pushes and every Sync until the pusher is restarted",
		"tenant", tenant, "path", d.cfg.Path, "err", cause)
}

// writebackFailures returns an error while any tenant failed to write
// back: every Sync fails with it.
func (d *durability) writebackFailures() error {
	d.failedMu.Lock()
	n := len(d.writebackFailed)
	d.failedMu.Unlock()
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%w (%d tenant(s))", errWriteback, n)
}
