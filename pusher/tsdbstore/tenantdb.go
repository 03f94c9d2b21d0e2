package tsdbstore

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/util/compression"
)

// A tenant's TSDB: its state while open (tenantDB), how the Store opens
// and closes one for the registry (registry.go), and the check that a
// tenant's path is free for its directory before it opens (tenantPaths).

// tenantDB is the state of one tenant's TSDB while it is open or opening.
type tenantDB struct {
	id  string
	dir string

	ready chan struct{} // closed when opening finished; db or err is set then
	db    *tsdb.DB
	err   error

	// Guarded by registry.mu.
	refs     int
	lastUsed time.Time
	closing  chan struct{} // set when closing starts, closed when it ended
	// recovering is set while a recovery runs (recover.go).
	recovering bool
	// broken is set when the tenant's storage was found lost, until a
	// recovery replaced it; set and cleared under registry.mu, with
	// registry.broken, and read without it by every append and sync of
	// the tenant (durability.usable), which should not take the
	// registry's lock, the one of every tenant, for it.
	broken atomic.Bool
	// queryOnly is set while the tenant was opened by reads alone: it is
	// closed as soon as the last one ends instead of after the idle
	// timeout, so queries cannot keep tenants open.
	queryOnly bool

	// rootID and dirID are the identities of the storage root and the
	// tenant's directory when its TSDB opened (wal.go). Set before
	// ready is closed, and by a recovery while no one uses the tenant.
	rootID, dirID fileID
	// walID is the identity of the WAL directory: while it is found at its
	// path, so are the directories above it (see checkIdentity).
	walID fileID

	// seriesMu serializes the creation of new series so that concurrent
	// pushes cannot both take the last slot under the series limit.
	seriesMu sync.Mutex
	// seriesCounts are, in the shared TSDB, the series of each tenant
	// that created one since it opened (shared.go). Guarded by seriesMu.
	seriesCounts map[string]*seriesCount
	// caches hold the head references of the series appended to
	// (seriescache.go); set with each TSDB opened for the tenant.
	caches atomic.Pointer[seriesCaches]

	// commits counts successful appender commits; Sync skips a tenant
	// whose count did not change since its last sync, so a commit of one
	// busy consumer does not fsync every idle tenant.
	commits atomic.Uint64

	syncMu        sync.Mutex
	syncedFrom    map[string]int // WAL dir -> first segment not known to be fsynced
	syncedCommits uint64         // commits covered by the last successful sync
	dirsSynced    bool
	// fsyncNext makes the next sync of the tenant fsync file by file
	// even with syncfs: a syncfs failed while the tenant had data to make
	// durable (syncfs.go).
	fsyncNext bool
	// kept are the descriptors of the newest WAL segments, by path, kept
	// open from one fsync to the next (wal.go).
	kept map[string]keptFile
}

// tenantExists reports whether dir holds a TSDB: a WAL directory is the one
// thing every TSDB opened by this package has.
func tenantExists(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, "wal"))
	return err == nil && fi.IsDir()
}

// openTenantDB opens the TSDB t names and records the identities of its
// directories (wal.go): the registry's open.
func (s *Store) openTenantDB(t *tenantDB) (*tsdb.DB, error) {
	db, err := s.openDB(t)
	if err != nil {
		return nil, err
	}
	if err := s.durable.recordIdentity(t); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	return db, nil
}

// openDB opens the TSDB in t's directory with the store's options.
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

// retire closes a TSDB the registry retires (its close), whose closing
// channel it set, and removes it from the registry.
func (s *Store) retire(t *tenantDB, reason string) {
	// Closing a TSDB whose files are gone would drop the only copy of its
	// data, the head: recover it instead.
	if err := s.durable.checkIdentity(t); err != nil {
		s.tenants.keep(t)
		s.durable.startRecovery(t, err)
		return
	}
	if err := s.durable.closeTenant(t, reason); err != nil {
		if t.unsynced() {
			// The head went with the close: what the files lack is
			// nowhere.
			s.durable.failWriteback(t.id, err)
		} else {
			s.logger.Error("closing tenant TSDB", "tenant", t.id, "reason", reason, "err", err)
		}
	} else {
		s.logger.Debug("closed tenant TSDB", "tenant", t.id, "reason", reason)
	}
	s.tenants.forget(t)
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
	// A tenant being closed is on disk.
	s.tenants.eachOpen(func(t *tenantDB) { set[t.id] = struct{}{} })
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
	var out []tenantStat
	s.tenants.eachOpen(func(t *tenantDB) {
		out = append(out, tenantStat{tenant: t.id, headSeries: t.db.Head().NumSeries()})
	})
	return out
}

// unsynced reports whether the tenant committed anything its last Sync did
// not cover.
func (t *tenantDB) unsynced() bool {
	t.syncMu.Lock()
	defer t.syncMu.Unlock()
	return t.commits.Load() != t.syncedCommits
}

// errTenantNotDir fails a tenant whose path holds something that is not a
// directory: an operator's mistake that no retry fixes by itself.
var errTenantNotDir = errors.New("tenant path is not a directory")

// tenantPaths checks tenants' paths before their TSDBs open there.
type tenantPaths struct {
	logger *slog.Logger
	// reported are the tenant paths already reported as not being
	// directories, so each is logged once.
	reported sync.Map
}

// check fails when the tenant's path exists and is not a directory,
// reporting it once per path at error level: the TSDB cannot be opened
// there until an operator moves the file away.
func (p *tenantPaths) check(id, dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil || fi.IsDir() {
		if errors.Is(err, fs.ErrNotExist) {
			p.reported.Delete(dir)
		}
		return nil
	}
	err = fmt.Errorf("%w: %s (mode %s) is not a directory; move it away so the tenant %q can be stored",
		errTenantNotDir, dir, fi.Mode(), id)
	if _, reported := p.reported.LoadOrStore(dir, struct{}{}); !reported {
		p.logger.Error("operator error: a file is where a tenant directory belongs; the tenant's writes fail until it is moved",
			"path", dir, "tenant", id, "mode", fi.Mode().String())
	}
	return err
}
