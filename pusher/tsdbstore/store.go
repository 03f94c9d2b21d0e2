package tsdbstore

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/ferrylabs/ferry/internal/logging"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// maxTenantLen bounds tenant IDs so that <path>/<tenant>/wal/<segment>
// stays far below PATH_MAX and NAME_MAX (255 bytes) on every filesystem.
const maxTenantLen = 150

// Store is the TSDB backend: one Prometheus TSDB per tenant, or one for
// every tenant in the shared tenancy. It implements backend.Backend and is
// safe for concurrent use.
//
// A tenant's TSDB is open while it is written or read, and stays open until
// it has been idle for -storage.idle-timeout. Every use holds a reference,
// and idle-closing skips tenants with references, so a TSDB is never closed
// under an in-flight Push, Sync or Querier.
type Store struct {
	cfg     Config
	logger  *slog.Logger
	metrics *metrics

	mu      sync.Mutex
	idle    *sync.Cond // signalled on s.mu when a tenant's last reference is released
	tenants map[string]*tenantDB
	closed  bool

	// write is the write path (writer.go).
	write *writer
	// meta keeps the tenants' metric metadata (metadata.go).
	meta *metadataStore

	stop     chan struct{}
	loopDone chan struct{}

	// lock is the exclusive lock on the storage root (lock.go).
	lock *rootLock
	// background counts recoveries, query-only closes and the shared
	// TSDB's opening at start, which Close waits for.
	background sync.WaitGroup
	// replayed is closed once the store is ready for writes: at once,
	// except in the shared tenancy on a path that holds the shared TSDB,
	// whose WAL is replayed first (openSharedEarly).
	replayed chan struct{}
	// broken counts tenants whose storage was lost and is not recovered
	// (recover.go); Sync fails while it is not 0. Guarded by mu.
	broken int
	// writebackFailed holds the tenants whose storage failed to write
	// back, with the error, until the process ends (writeback.go); Sync
	// fails while it is not empty. Guarded by mu.
	writebackFailed map[string]error
	// lostLog rate-limits the reports of lost tenant storage.
	lostLog *logging.Limiter
	// reportedPaths are the tenant paths already reported as not being
	// directories, so each is logged once.
	reportedPaths sync.Map
	// syncs coalesces concurrent Syncs into rounds (sync.go).
	syncs syncRounds
	// syncfsRoot is the storage root opened for syncfs(2), nil with
	// -storage.sync-method=fsync; syncfsDev is the device of its
	// filesystem (syncfs.go).
	syncfsRoot *os.File
	syncfsDev  uint64
	// active holds, in the shared tenancy, each active tenant's last
	// write (shared.go). Guarded by mu.
	active map[string]time.Time
}

var _ backend.Backend = (*Store)(nil)

// tenantDB is the state of one tenant's TSDB while it is open or opening.
type tenantDB struct {
	id  string
	dir string

	ready chan struct{} // closed when opening finished; db or err is set then
	db    *tsdb.DB
	err   error

	// Guarded by Store.mu.
	refs     int
	lastUsed time.Time
	closing  chan struct{} // set when closing starts, closed when it ended
	// broken is set when the tenant's storage was found lost; recovering
	// while a recovery runs (recover.go).
	broken, recovering bool
	// queryOnly is set while the tenant was opened by reads alone: it is
	// closed as soon as the last one ends instead of after the idle
	// timeout, so queries cannot keep tenants open.
	queryOnly bool

	// rootID and dirID are the identities of the storage root and the
	// tenant's directory when its TSDB opened (identity.go). Set before
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
	// open from one fsync to the next (writeback.go).
	kept map[string]keptFile
}

// New returns a Store keeping its tenants under cfg.Path. Metrics are
// registered on reg unless it is nil. Close releases the Store.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("tsdb store config: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Path, 0o750); err != nil {
		return nil, fmt.Errorf("create tsdb store directory: %w", err)
	}
	lock, err := lockRoot(cfg.Path)
	if err != nil {
		return nil, err
	}
	if err := checkTenancy(cfg); err != nil {
		return nil, errors.Join(err, lock.release())
	}
	s := &Store{
		cfg:      cfg,
		logger:   logger,
		lock:     lock,
		lostLog:  logging.NewLimiter(lostLogInterval),
		tenants:  make(map[string]*tenantDB),
		active:   make(map[string]time.Time),
		stop:     make(chan struct{}),
		loopDone: make(chan struct{}),
		replayed: make(chan struct{}),
	}
	if cfg.SyncMethod == SyncSyncfs {
		if err := s.openSyncfsRoot(); err != nil {
			return nil, errors.Join(err, s.lock.release())
		}
	}
	if cfg.shared() && cfg.OutOfOrderWindow == 0 {
		logger.Warn("every tenant shares one head's time window: a sample more than half a block behind the newest sample of any tenant is refused as out of bounds, "+
			"so a partition caught up from more than that behind loses its tenants' older samples; -storage.out-of-order-window accepts them",
			"tenancy", TenancyShared, "half_block", cfg.BlockDuration/2)
	}
	s.idle = sync.NewCond(&s.mu)
	s.metrics = newMetrics(reg, s)
	s.write = &writer{cfg: &s.cfg, metrics: s.metrics, logger: logger}
	s.meta = newMetadataStore(cfg.Path, cfg.MaxMetadataPerTenant, logger, s.metrics.metadataDropped)
	go s.idleLoop()
	s.openSharedEarly()
	return s, nil
}

// validateTenant rejects tenant IDs that are not a single, portable path
// element. Rejecting is preferred over escaping: the directory names stay
// the tenant IDs an operator sees in logs and in Tenants(), and no two IDs
// can map to one directory.
func validateTenant(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty", errInvalidTenant)
	case id == "." || id == "..":
		return fmt.Errorf("%w: %q is not a directory name", errInvalidTenant, id)
	case len(id) > maxTenantLen:
		return fmt.Errorf("%w: %d bytes, at most %d allowed", errInvalidTenant, len(id), maxTenantLen)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: not valid UTF-8", errInvalidTenant)
	case strings.ContainsAny(id, "/\\\x00"):
		return fmt.Errorf("%w: %q contains a path separator or NUL", errInvalidTenant, id)
	case id == lockFileName:
		return fmt.Errorf("%w: %q is the name of the store's lock file", errInvalidTenant, id)
	case id == sharedDirName:
		return fmt.Errorf("%w: %q is the name of the TSDB shared by all tenants", errInvalidTenant, id)
	}
	return nil
}

// Close closes every tenant's TSDB and stops the idle loop. It waits for
// in-flight pushes, syncs and open Queriers to finish first, so every
// Querier must be closed. Close is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	s.mu.Unlock()
	<-s.loopDone // No idle close is running or will start.
	s.background.Wait()

	s.mu.Lock()
	for s.busy() {
		s.idle.Wait()
	}
	tenants := slices.Collect(maps.Values(s.tenants))
	clear(s.tenants)
	s.mu.Unlock()

	errs := []error{s.meta.persist()}
	for _, t := range tenants {
		// A tenant whose storage is lost gets a last chance to write its
		// head anew before it is closed for good.
		if t.db != nil && errors.Is(s.usable(t), errStorageLost) {
			if err := s.reopenTenant(t); err != nil {
				errs = append(errs, fmt.Errorf("tenant %q lost its storage and could not be recovered: %w", t.id, err))
			}
		}
		errs = append(errs, s.closeTenant(t, "shutdown"))
	}
	if s.syncfsRoot != nil {
		errs = append(errs, s.syncfsRoot.Close())
	}
	errs = append(errs, s.lock.release())
	return errors.Join(errs...)
}
