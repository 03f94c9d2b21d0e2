package tsdbstore

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/prometheus/prometheus/tsdb"

	"github.com/ferrylabs/ferry/internal/logging"
)

// durability proves what the store acknowledged is on disk: Sync rounds
// that fsync (or syncfs) the open tenants' write logs (sync.go, wal.go,
// syncfs.go), the identity checks that find a tenant's storage vanished
// under its open TSDB (wal.go), the recovery of such a tenant from its
// in-memory head (recover.go), and the tenants failed for good when their
// storage did not write back (sync.go).
//
// It holds no TSDB of its own: it works on the ones the registry holds
// open, through the registry's references and states.
type durability struct {
	cfg     *Config
	logger  *slog.Logger
	metrics *metrics
	tenants *registry
	// lock is the store's lock on the storage root, taken again when a
	// recovery recreated the root.
	lock *rootLock
	// openDB opens a fresh TSDB for a tenant being recovered;
	// persistMetadata writes the metadata that changed, in every round.
	openDB          func(t *tenantDB) (*tsdb.DB, error)
	persistMetadata func() error

	// rounds coalesces concurrent Syncs into rounds (sync.go).
	rounds syncRounds
	// syncfsRoot is the storage root opened for syncfs(2), nil with
	// -storage.sync-method=fsync; syncfsDev is the device of its
	// filesystem (syncfs.go).
	syncfsRoot *os.File
	syncfsDev  uint64

	failedMu sync.Mutex
	// writebackFailed holds the tenants whose storage failed to write
	// back, with the error, until the process ends (sync.go); Sync
	// fails while it is not empty.
	writebackFailed map[string]error
	// lostLog rate-limits the reports of lost tenant storage.
	lostLog *logging.Limiter

	// testFsync replaces the fsync of a file or directory, and testSyncfs
	// the syncfs(2) of the storage root, for tests that count or fail
	// them; set before the first Sync.
	testFsync  func(path string) error
	testSyncfs func() error
}

func newDurability(cfg *Config, logger *slog.Logger, m *metrics, tenants *registry, lock *rootLock) *durability {
	d := &durability{cfg: cfg, logger: logger, metrics: m, tenants: tenants, lock: lock,
		lostLog: logging.NewLimiter(lostLogInterval)}
	d.rounds.run = d.syncOpenTenants
	d.rounds.spawn = tenants.spawn
	return d
}

// closeTenant closes the tenant's DB, which flushes and fsyncs its WAL
// segment, and fsyncs the WAL directories so that segments created since the
// last Sync survive a crash too.
func (d *durability) closeTenant(t *tenantDB, reason string) error {
	err := t.db.Close()
	if err != nil {
		err = fmt.Errorf("close TSDB of tenant %q: %w", t.id, err)
	}
	t.closeKept()
	for _, sub := range walDirs {
		if serr := d.fsyncPath(filepath.Join(t.dir, sub)); serr != nil && !errors.Is(serr, fs.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("fsync %s of tenant %q: %w", sub, t.id, serr))
		}
	}
	d.metrics.tenantCloses.WithLabelValues(reason).Inc()
	return err
}
