package tsdbstore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/prometheus/tsdb/wlog"
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

// walDirs are the write logs of a TSDB that hold samples not yet in a block:
// the WAL, and the WBL for out-of-order samples.
var walDirs = []string{"wal", wlog.WblDirName}

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

// syncWorkers is how many tenants a round fsyncs at once.
func (d *durability) syncWorkers() int {
	if d.cfg.SyncConcurrency > 0 {
		return d.cfg.SyncConcurrency
	}
	return DefaultSyncConcurrency
}

// syncOpenTenants is round r: it syncs every open tenant r covers, in
// parallel, and waits for those being closed.
func (d *durability) syncOpenTenants(r *syncRound) (int, error) {
	open, closing, err := d.tenants.holdOpen(r.covers)
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

// walState is what a sync of a tenant made durable: the commits it covers,
// and the fields of tenantDB.syncedFrom and dirsSynced after it.
type walState struct {
	commits    uint64
	syncedFrom map[string]int
	dirsSynced bool
}

// record makes st the tenant's durable point; the caller holds t.syncMu.
func (t *tenantDB) record(st *walState) {
	t.syncedCommits = st.commits
	t.syncedFrom = st.syncedFrom
	t.dirsSynced = st.dirsSynced
}

// syncTenant syncs what the tenant committed since its last sync, and
// reports whether there was anything. With syncfs it fsyncs nothing when
// the round's syncfs covers the tenant: it checks the files a fsync would
// have found and returns the state to record once the syncfs succeeded
// (pending); else it fsyncs file by file and records the state itself.
func (d *durability) syncTenant(t *tenantDB, syncfs bool) (pending *walState, did bool, err error) {
	t.syncMu.Lock()
	defer t.syncMu.Unlock()
	// Read the count before syncing: the sync covers at least those
	// commits; any that land meanwhile are synced next time.
	commits := t.commits.Load()
	// Checked even when nothing was committed since the last sync: a
	// tenant whose files vanished holds its data in memory only.
	if err := d.usable(t); err != nil {
		return nil, false, err
	}
	if commits == t.syncedCommits && t.dirsSynced {
		return nil, false, nil
	}
	byFile := !syncfs || t.fsyncNext || !d.onSyncfsFilesystem(t)
	op := d.checkPath
	if byFile {
		op = func(path string) error { return d.fsyncKept(t, path) }
	}
	st, err := d.syncWAL(t, op)
	if err != nil {
		return nil, false, err
	}
	st.commits = commits
	if !byFile {
		return st, false, nil
	}
	t.record(st)
	t.fsyncNext = false
	newest := make([]string, 0, len(st.syncedFrom))
	for sub, seg := range st.syncedFrom {
		newest = append(newest, wlog.SegmentName(filepath.Join(t.dir, sub), seg))
	}
	t.keepOnly(newest...)
	return nil, true, nil
}
