package tsdbstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/prometheus/tsdb/wlog"

	"github.com/ferrylabs/ferry/pusher/backend"
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

// syncRounds coalesces concurrent Syncs into rounds. A round covers what was
// committed before it started, so a caller may only be served by a round
// that starts after its call began: one arriving while a round runs waits
// for the next. The rounds run on their own goroutine, so a caller whose
// context ends leaves without cancelling the round for the others.
type syncRounds struct {
	mu sync.Mutex
	// current is the running round; nil when none runs.
	current *syncRound
	// next is the round the callers that arrived during the current one
	// wait for; nil when none did. It starts when current ends.
	next *syncRound
	// rounds counts the rounds started, for tests.
	rounds atomic.Int64
	// fsync fsyncs a file or directory; tests replace it (before the
	// first Sync) to count or fail fsyncs. nil is syncFile.
	fsync func(path string) error
	// syncfs replaces the syncfs(2) of the storage root for tests, like
	// fsync; nil is syncfsFile.
	syncfs func() error
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
	return s.sync(ctx, nil)
}

// SyncTenants is Sync for the named tenants only (backend.TenantSyncer):
// the round that serves the call fsyncs their write logs and those of the
// tenants its other callers named, not every open tenant's. Empty tenants
// syncs every tenant.
func (s *Store) SyncTenants(ctx context.Context, tenants []string) (int, error) {
	return s.sync(ctx, tenants)
}

// sync makes what was committed for tenants (every tenant when empty)
// before the call durable.
func (s *Store) sync(ctx context.Context, tenants []string) (int, error) {
	if s.cfg.shared() {
		// Every tenant is in the one TSDB, and its WAL is synced whole.
		tenants = nil
	}
	start := time.Now()
	synced, err := s.awaitRound(ctx, tenants)
	s.metrics.syncDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		s.metrics.syncFailures.Inc()
		return synced, requestError("sync", err)
	}
	return synced, nil
}

// awaitRound waits for a round that started after the call and covers
// tenants, and returns its result.
func (s *Store) awaitRound(ctx context.Context, tenants []string) (int, error) {
	if err := ctx.Err(); err != nil {
		s.mu.Lock()
		none := len(s.tenants) == 0
		s.mu.Unlock()
		if !none {
			return 0, err
		}
		// No tenant is open: the round only persists the metadata, so
		// there is nothing worth cancelling.
		ctx = context.WithoutCancel(ctx)
	}
	r, err := s.joinRound(tenants)
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

// joinRound returns the round that will serve a caller arriving now with
// tenants to sync: the next one when a round runs (the running one may
// have passed tenants the caller committed to, or not cover them at all),
// else a new one, started at once.
func (s *Store) joinRound(tenants []string) (*syncRound, error) {
	rs := &s.syncs
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
	// Close waits for s.background; adding to it after Close began waiting
	// is not allowed, so check closed under the same lock as Close.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, backend.ErrShuttingDown
	}
	s.background.Add(1)
	s.mu.Unlock()
	r := &syncRound{done: make(chan struct{}), callers: 1}
	r.ask(tenants)
	rs.current = r
	go s.runRounds(r)
	return r, nil
}

// runRounds runs r, then the rounds callers queued meanwhile, until none is
// waiting.
func (s *Store) runRounds(r *syncRound) {
	defer s.background.Done()
	rs := &s.syncs
	for r != nil {
		rs.rounds.Add(1)
		r.synced, r.err = s.syncOpenTenants(r)
		close(r.done)
		rs.mu.Lock()
		r, rs.next = rs.next, nil
		rs.current = r
		rs.mu.Unlock()
	}
}

// syncWorkers is how many tenants a round fsyncs at once.
func (s *Store) syncWorkers() int {
	if s.cfg.SyncConcurrency > 0 {
		return s.cfg.SyncConcurrency
	}
	return DefaultSyncConcurrency
}

// syncOpenTenants is round r: it syncs every open tenant r covers, in
// parallel, and waits for those being closed.
func (s *Store) syncOpenTenants(r *syncRound) (int, error) {
	var open []*tenantDB
	var closing []chan struct{}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, backend.ErrShuttingDown
	}
	for _, t := range s.tenants {
		switch {
		case !r.covers(t.id):
		case t.closing != nil:
			closing = append(closing, t.closing)
		case t.db != nil:
			t.refs++
			open = append(open, t)
		}
		// A tenant still opening has no commits yet: nothing to sync.
	}
	s.mu.Unlock()

	syncfs := s.syncfsRoot != nil
	var (
		next    atomic.Int64 // index of the next tenant to take
		synced  atomic.Int64
		mu      sync.Mutex // guards errs and pending
		errs    []error
		pending []pendingTenant
		wg      sync.WaitGroup
	)
	for range min(s.syncWorkers(), len(open)) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(open)); i = next.Add(1) - 1 {
				t := open[i]
				st, did, err := s.syncTenant(t, syncfs)
				if st != nil {
					// Released once the syncfs decided its fate: a
					// recovery or close must not change its state
					// meanwhile.
					mu.Lock()
					pending = append(pending, pendingTenant{t, st})
					mu.Unlock()
					continue
				}
				s.release(t)
				if err != nil {
					// Each tenant's error is its own: a lost one is
					// recovered, one that failed to write back is
					// failed for good, the others are still synced.
					switch {
					case errors.Is(err, errStorageLost):
						s.startRecovery(t, err)
					case errors.Is(err, errWriteback):
						s.failWriteback(t.id, err)
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
		if err := s.syncfsPending(pending); err != nil {
			errs = append(errs, err)
		} else {
			synced.Add(int64(len(pending)))
		}
	}
	if err := s.meta.persist(); err != nil {
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
	s.mu.Lock()
	broken := s.broken
	s.mu.Unlock()
	if broken > 0 {
		errs = append(errs, fmt.Errorf("%w: %d tenant(s) not recovered yet", errStorageLost, broken))
	}
	if err := s.writebackFailures(); err != nil {
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
func (s *Store) syncTenant(t *tenantDB, syncfs bool) (pending *walState, did bool, err error) {
	t.syncMu.Lock()
	defer t.syncMu.Unlock()
	// Read the count before syncing: the sync covers at least those
	// commits; any that land meanwhile are synced next time.
	commits := t.commits.Load()
	// Checked even when nothing was committed since the last sync: a
	// tenant whose files vanished holds its data in memory only.
	if err := s.usable(t); err != nil {
		return nil, false, err
	}
	if commits == t.syncedCommits && t.dirsSynced {
		return nil, false, nil
	}
	byFile := !syncfs || t.fsyncNext || !s.onSyncfsFilesystem(t)
	op := s.checkPath
	if byFile {
		op = func(path string) error { return s.fsyncKept(t, path) }
	}
	st, err := s.syncWAL(t, op)
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

// syncWAL makes durable, through op, the tenant's WAL segments written since
// the last sync and, when they gained a segment, their directories; and
// once the tenant's own directory entries. It returns the tenant's state
// after that, without recording it. The caller holds t.syncMu.
//
// t.syncedFrom holds, for each write log listed before, the newest segment
// of that listing: the segments before it are fsynced, and the directory
// entries of all up to it are durable. A write log without an entry was not
// listed yet (a new or recovered tenant, or no WBL).
func (s *Store) syncWAL(t *tenantDB, op func(path string) error) (*walState, error) {
	st := &walState{syncedFrom: make(map[string]int, len(walDirs)), dirsSynced: t.dirsSynced}
	for _, sub := range walDirs {
		dir := filepath.Join(t.dir, sub)
		last, listed := t.syncedFrom[sub]
		if listed {
			done, err := syncCurrentSegment(dir, last, op)
			if err != nil {
				return nil, fmt.Errorf("fsync %s segment %d of tenant %q: %w", sub, last, t.id, err)
			}
			if done {
				st.syncedFrom[sub] = last
				continue
			}
		}
		segs, err := segmentIndexes(dir)
		if errors.Is(err, fs.ErrNotExist) && sub != "wal" {
			continue // No WBL: out-of-order samples were never enabled.
		}
		if errors.Is(err, fs.ErrNotExist) {
			// Every open TSDB has a WAL: without it nothing it
			// acknowledged is on disk.
			return nil, fmt.Errorf("%w: tenant %q: %s is missing", errStorageLost, t.id, dir)
		}
		if err != nil {
			return nil, fmt.Errorf("list %s of tenant %q: %w", sub, t.id, err)
		}
		if listed && (len(segs) == 0 || segs[len(segs)-1] < last) {
			// A truncation never removes the newest segment.
			return nil, fmt.Errorf("%w: tenant %q: segment %d of %s vanished", errStorageLost, t.id, last, dir)
		}
		if !listed && sub != "wal" && st.dirsSynced {
			// A WBL created after the tenant's directory was fsynced
			// (out-of-order samples enabled later) is a new entry in it.
			st.dirsSynced = false
		}
		newest := last
		for _, seg := range segs {
			if seg < last {
				continue
			}
			err := op(wlog.SegmentName(dir, seg))
			if errors.Is(err, fs.ErrNotExist) && seg == segs[len(segs)-1] {
				// Older segments may be removed by a WAL truncation
				// meanwhile; the newest one never is.
				return nil, fmt.Errorf("%w: tenant %q: segment %d of %s vanished", errStorageLost, t.id, seg, dir)
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("fsync %s segment %d of tenant %q: %w", sub, seg, t.id, err)
			}
			newest = seg
		}
		// Only new segments need their directory entries made durable;
		// a removed one (WAL truncation) may come back after a crash, and
		// replay skips segments its checkpoint covers. A segment created
		// after the listing is not in segs, but the next sync finds it
		// after last (see syncCurrentSegment) and fsyncs the directory
		// again.
		if !listed || newest > last {
			if err := op(dir); err != nil {
				return nil, fmt.Errorf("fsync %s directory of tenant %q: %w", sub, t.id, err)
			}
		}
		st.syncedFrom[sub] = newest
	}
	if !st.dirsSynced {
		// The tenant's directory and its entry in the store directory were
		// created by the first write; make them durable once.
		if err := op(t.dir); err != nil {
			return nil, fmt.Errorf("fsync directory of tenant %q: %w", t.id, err)
		}
		if err := op(s.cfg.Path); err != nil {
			return nil, fmt.Errorf("fsync store directory: %w", err)
		}
		st.dirsSynced = true
	}
	return st, nil
}

// syncCurrentSegment is the common case of a sync, without listing the
// write log: when segment last+1 does not exist, last is still the newest
// segment and the only one that can hold records not fsynced yet, and no
// segment entry was added to the directory since it was listed. That holds
// because a write log creates its segments one after the other, each
// numbered one above the previous (wlog.WL.nextSegment), and never creates
// last+2 before last+1; a truncation removes only segments older than the
// one it starts, so it never removes last+1 without last+2 existing, nor
// the newest segment. A commit that returned before this sync started
// wrote to the segment current then, which is at most last when last+1
// does not exist even now. It reports false when the write log must be
// listed: a newer segment exists, or last was removed meanwhile.
func syncCurrentSegment(dir string, last int, op func(path string) error) (bool, error) {
	_, err := os.Lstat(wlog.SegmentName(dir, last+1))
	switch {
	case err == nil:
		return false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return false, err
	}
	err = op(wlog.SegmentName(dir, last))
	if errors.Is(err, fs.ErrNotExist) {
		// Removed by a truncation after last+1 and later ones were
		// created and removed too, or the directory is gone: the listing
		// tells which.
		return false, nil
	}
	return err == nil, err
}

// fsyncPath fsyncs a file or directory, through the test hook if set.
func (s *Store) fsyncPath(path string) error {
	if f := s.syncs.fsync; f != nil {
		return f(path)
	}
	return syncFile(path)
}

// segmentIndexes lists the indexes of the segment files in a WAL directory
// in ascending order, skipping checkpoints and other entries.
func segmentIndexes(dir string) ([]int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var segs []int
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if i, err := strconv.Atoi(e.Name()); err == nil && i >= 0 {
			segs = append(segs, i)
		}
	}
	slices.Sort(segs)
	return segs, nil
}

// syncFile fsyncs a file through a read-only descriptor: fsync(2) flushes
// the file, not the descriptor, and reading never disturbs the TSDB's writer.
// A failed fsync is an errWriteback.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = writebackError(f.Sync())
	return errors.Join(err, f.Close())
}

// syncDir fsyncs a directory, making the creation of its entries durable.
func syncDir(path string) error {
	return syncFile(path)
}
