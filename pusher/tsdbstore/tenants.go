package tsdbstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/util/compression"

	"github.com/ferrylabs/ferry/pusher/backend"
)

// The tenants of a Store: a tenant's TSDB opens on first use and closes
// after -storage.idle-timeout without one. Every use holds a reference
// (acquire, release), and idle closing skips referenced tenants.

// acquire returns the tenant's open TSDB with a reference the caller must
// release. With create false it returns nil, nil for a tenant that has no
// TSDB on disk, so that reads never create directories.
func (s *Store) acquire(ctx context.Context, id string, create bool) (*tenantDB, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, backend.ErrShuttingDown
		}
		t := s.tenants[id]
		if t == nil {
			dir := filepath.Join(s.cfg.Path, id)
			if !create && !tenantExists(dir) {
				s.mu.Unlock()
				return nil, nil
			}
			if create {
				if err := s.admit(id, dir); err != nil {
					s.mu.Unlock()
					return nil, err
				}
			}
			t = &tenantDB{id: id, dir: dir, ready: make(chan struct{}), refs: 1, syncedFrom: map[string]int{}, queryOnly: !create}
			s.tenants[id] = t
			s.mu.Unlock()
			// Opening replays the WAL and may take long; other tenants
			// must not wait for it, so it runs outside s.mu.
			db, err := s.openDB(t)
			if err == nil {
				if err = s.recordIdentity(t); err != nil {
					err = errors.Join(err, db.Close())
					db = nil
				}
			}
			s.mu.Lock()
			t.db, t.err = db, err
			t.lastUsed = time.Now()
			if err != nil {
				delete(s.tenants, id)
				t.refs--
			}
			close(t.ready)
			s.idle.Broadcast()
			s.mu.Unlock()
			if err != nil {
				return nil, err
			}
			return t, nil
		}
		if t.closing != nil {
			closing := t.closing
			s.mu.Unlock()
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
		s.mu.Unlock()
		select {
		case <-t.ready:
		case <-ctx.Done():
			s.release(t)
			return nil, ctx.Err()
		}
		if t.err != nil {
			s.release(t)
			return nil, t.err
		}
		return t, nil
	}
}

// acquireForWrite returns, with a reference, the open TSDB the tenant's
// writes go to, creating it if needed; in the shared tenancy it first
// admits the tenant under -pusher.max-tenants.
func (s *Store) acquireForWrite(ctx context.Context, tenant string) (*tenantDB, error) {
	if s.cfg.shared() {
		if err := s.admitShared(tenant); err != nil {
			return nil, err
		}
	}
	return s.acquire(ctx, s.dbID(tenant), true)
}

// release drops a reference taken by acquire and marks the tenant used now,
// which postpones its idle close.
func (s *Store) release(t *tenantDB) {
	s.mu.Lock()
	t.refs--
	t.lastUsed = time.Now()
	if t.refs == 0 {
		s.idle.Broadcast()
		if t.queryOnly && t.closing == nil && t.db != nil && !t.broken && !s.closed && t.id != sharedDirName {
			// Opened for reads only: close it now rather than holding
			// its memory and descriptors for the idle timeout. Not the
			// shared TSDB: reads cannot open more than that one, and
			// opening it replays every tenant's WAL, which each read of
			// an idle store would otherwise pay again.
			t.closing = make(chan struct{})
			s.background.Add(1)
			go func() {
				defer s.background.Done()
				s.closeAndForget(t, "query")
			}()
		}
	}
	s.mu.Unlock()
}

// admit checks that a tenant not open yet may be opened for writing: its
// path is not taken by a file, and -pusher.max-tenants is not reached.
// s.mu is held.
func (s *Store) admit(id, dir string) error {
	if err := s.checkTenantPath(id, dir); err != nil {
		return err
	}
	// The shared TSDB is one; its tenants are admitted by admitShared.
	if s.cfg.MaxTenants <= 0 || s.cfg.shared() {
		return nil
	}
	open := 0
	for _, t := range s.tenants {
		if !t.queryOnly {
			open++
		}
	}
	if open >= s.cfg.MaxTenants {
		return s.capacityError(capacityTenantLimit, s.cfg.idleCheckInterval(),
			fmt.Errorf("%w: %d tenants are open, the limit is %d (-pusher.max-tenants); retry once one has been idle for -storage.idle-timeout", errTenantLimit, open, s.cfg.MaxTenants))
	}
	return nil
}

// closeAndForget closes a tenant whose closing channel the caller set, and
// removes it from the open tenants.
func (s *Store) closeAndForget(t *tenantDB, reason string) {
	// Closing a TSDB whose files are gone would drop the only copy of its
	// data, the head: recover it instead.
	if err := s.checkIdentity(t); err != nil {
		s.mu.Lock()
		close(t.closing)
		t.closing = nil
		s.mu.Unlock()
		s.startRecovery(t, err)
		return
	}
	if err := s.closeTenant(t, reason); err != nil {
		if t.unsynced() {
			// The head went with the close: what the files lack is
			// nowhere.
			s.failWriteback(t.id, err)
		} else {
			s.logger.Error("closing tenant TSDB", "tenant", t.id, "reason", reason, "err", err)
		}
	} else {
		s.logger.Debug("closed tenant TSDB", "tenant", t.id, "reason", reason)
	}
	s.mu.Lock()
	delete(s.tenants, t.id)
	close(t.closing)
	s.mu.Unlock()
}

// tenantExists reports whether dir holds a TSDB: a WAL directory is the one
// thing every TSDB opened by this package has.
func tenantExists(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, "wal"))
	return err == nil && fi.IsDir()
}

func (s *Store) openDB(t *tenantDB) (*tsdb.DB, error) {
	opts := tsdb.DefaultOptions()
	opts.RetentionDuration = s.cfg.Retention.Milliseconds()
	opts.MinBlockDuration = s.cfg.BlockDuration.Milliseconds()
	opts.MaxBlockDuration = s.cfg.maxBlockDuration().Milliseconds()
	opts.OutOfOrderTimeWindow = s.cfg.OutOfOrderWindow.Milliseconds()
	opts.EnableExemplarStorage = s.cfg.MaxExemplars > 0
	opts.MaxExemplars = int64(s.cfg.MaxExemplars)
	opts.WALSegmentSize = 0 // The default size; a negative size would disable the WAL.
	opts.WALCompression = compression.Snappy
	opts.StripeSize = s.cfg.StripeSize
	opts.HeadChunksWriteBufferSize = s.cfg.HeadChunksWriteBufferSize
	opts.BlockReloadInterval = s.cfg.blockReloadInterval
	// Config.Isolation says what turning it off gives up.
	opts.IsolationDisabled = !s.cfg.Isolation
	// Every tenant DB runs its own compaction; spreading them out keeps
	// tenants opened together from compacting at the same moment.
	opts.EnableDelayedCompaction = true
	// The store's lock on the storage root (lock.go) keeps other pushers
	// out. A lock file per tenant would also stop a recovery from opening
	// the tenant afresh while the lost TSDB still holds the old lock, and
	// closing that one would remove the new one's file.
	opts.NoLockfile = true
	// The series caches learn of the head's removals of series through
	// the lifecycle callback, which the head calls from its garbage
	// collection.
	caches := newSeriesCaches()
	opts.SeriesLifecycleCallback = caches

	db, err := tsdb.Open(t.dir, s.tsdbLogger(t.id), s.metrics.tsdb.registerer(t.id), opts, nil)
	if err != nil {
		s.metrics.tenantOpenFailures.Inc()
		return nil, fmt.Errorf("open TSDB of tenant %q: %w", t.id, err)
	}
	caches.db = db
	t.caches.Store(caches)
	s.metrics.tenantOpens.Inc()
	s.logger.Debug("opened tenant TSDB", "tenant", t.id, "dir", t.dir)
	return db, nil
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

// idleLoop closes tenants idle for longer than the idle timeout until Close.
func (s *Store) idleLoop() {
	defer close(s.loopDone)
	if s.cfg.IdleTimeout <= 0 {
		<-s.stop
		return
	}
	ticker := time.NewTicker(s.cfg.idleCheckInterval())
	defer ticker.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-ticker.C:
			s.closeIdle(now)
		}
	}
}

// closeIdle closes every tenant that has no reference and was last used
// more than the idle timeout before now.
func (s *Store) closeIdle(now time.Time) {
	var victims []*tenantDB
	s.mu.Lock()
	s.forgetIdleShared(now)
	for _, t := range s.tenants {
		// A broken tenant's head holds data its recovery needs.
		if t.refs == 0 && t.closing == nil && t.db != nil && !t.broken && now.Sub(t.lastUsed) > s.cfg.IdleTimeout {
			t.closing = make(chan struct{})
			victims = append(victims, t)
		}
	}
	s.mu.Unlock()
	for _, t := range victims {
		s.closeAndForget(t, "idle")
	}
}

// closeTenant closes the tenant's DB, which flushes and fsyncs its WAL
// segment, and fsyncs the WAL directories so that segments created since the
// last Sync survive a crash too.
func (s *Store) closeTenant(t *tenantDB, reason string) error {
	err := t.db.Close()
	if err != nil {
		err = fmt.Errorf("close TSDB of tenant %q: %w", t.id, err)
	}
	t.closeKept()
	for _, sub := range walDirs {
		if serr := s.fsyncPath(filepath.Join(t.dir, sub)); serr != nil && !errors.Is(serr, fs.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("fsync %s of tenant %q: %w", sub, t.id, serr))
		}
	}
	s.metrics.tenantCloses.WithLabelValues(reason).Inc()
	return err
}

// busy reports whether any tenant is referenced; s.mu must be held.
func (s *Store) busy() bool {
	for _, t := range s.tenants {
		if t.refs > 0 {
			return true
		}
	}
	return false
}

// Tenants returns the IDs of all tenants with a TSDB, open or on disk, in
// sorted order.
func (s *Store) Tenants() []string {
	if s.cfg.shared() {
		tenants, err := s.sharedTenants()
		if err != nil {
			s.logger.Error("listing tenants", "err", err)
		}
		return tenants
	}
	set := map[string]struct{}{}
	s.mu.Lock()
	for id, t := range s.tenants {
		if t.db != nil {
			set[id] = struct{}{}
		}
	}
	s.mu.Unlock()
	entries, err := os.ReadDir(s.cfg.Path)
	if err != nil {
		s.logger.Error("listing tenant directories", "path", s.cfg.Path, "err", err)
	}
	for _, e := range entries {
		if e.IsDir() && validateTenant(e.Name()) == nil && tenantExists(filepath.Join(s.cfg.Path, e.Name())) {
			set[e.Name()] = struct{}{}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

type tenantStat struct {
	tenant     string
	headSeries uint64
}

// openTenantStats reports the open tenants for the metrics collector.
func (s *Store) openTenantStats() []tenantStat {
	if s.cfg.shared() {
		return s.sharedOpenTenantStats()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []tenantStat
	for id, t := range s.tenants {
		if t.db != nil && t.closing == nil {
			out = append(out, tenantStat{tenant: id, headSeries: t.db.Head().NumSeries()})
		}
	}
	return out
}

// unsynced reports whether the tenant committed anything its last Sync did
// not cover.
func (t *tenantDB) unsynced() bool {
	t.syncMu.Lock()
	defer t.syncMu.Unlock()
	return t.commits.Load() != t.syncedCommits
}
