package tsdbstore

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

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

	// tenants holds the open TSDBs, their references and limits
	// (registry.go).
	tenants *registry
	// durable makes what was pushed durable, and finds and recovers lost
	// storage (durability.go).
	durable *durability
	// write is the write path (writer.go).
	write *writer
	// meta keeps the tenants' metric metadata (metadata.go).
	meta *metadataStore

	// lock is the exclusive lock on the storage root (lock.go).
	lock *rootLock
	// replayed is closed once the store is ready for writes: at once,
	// except in the shared tenancy on a path that holds the shared TSDB,
	// whose WAL is replayed first (openSharedEarly).
	replayed chan struct{}
}

var _ backend.Backend = (*Store)(nil)

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
	var syncfsRoot *os.File
	var syncfsDev uint64
	if cfg.SyncMethod == SyncSyncfs {
		if syncfsRoot, syncfsDev, err = openSyncfsRoot(cfg.Path); err != nil {
			return nil, errors.Join(err, lock.release())
		}
	}
	s := &Store{cfg: cfg, logger: logger, lock: lock, replayed: make(chan struct{})}
	if cfg.shared() && cfg.OutOfOrderWindow == 0 {
		logger.Warn("every tenant shares one head's time window: a sample more than half a block behind the newest sample of any tenant is refused as out of bounds, "+
			"so a partition caught up from more than that behind loses its tenants' older samples; -storage.out-of-order-window accepts them",
			"tenancy", TenancyShared, "half_block", cfg.BlockDuration/2)
	}
	s.metrics = newMetrics(s)
	s.tenants = newRegistry(&s.cfg, logger, s.metrics)
	s.durable = newDurability(&s.cfg, logger, s.metrics, s.tenants, lock)
	s.durable.syncfsRoot, s.durable.syncfsDev = syncfsRoot, syncfsDev
	s.write = &writer{cfg: &s.cfg, metrics: s.metrics, logger: logger}
	s.meta = newMetadataStore(cfg.Path, cfg.MaxMetadataPerTenant, logger, s.metrics.metadataDropped)
	s.tenants.open, s.tenants.close = s.openTenantDB, s.retire
	s.durable.openDB, s.durable.persistMetadata = s.openDB, s.meta.persist
	s.metrics.register(reg, s)
	go s.tenants.idleLoop()
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
	tenants, ok := s.tenants.shut()
	if !ok {
		return nil
	}
	errs := []error{s.meta.persist()}
	for _, t := range tenants {
		// A tenant whose storage is lost gets a last chance to write its
		// head anew before it is closed for good.
		if t.db != nil && errors.Is(s.durable.usable(t), errStorageLost) {
			if err := s.durable.reopenTenant(t); err != nil {
				errs = append(errs, fmt.Errorf("tenant %q lost its storage and could not be recovered: %w", t.id, err))
			}
		}
		errs = append(errs, s.durable.closeTenant(t, "shutdown"))
	}
	if s.durable.syncfsRoot != nil {
		errs = append(errs, s.durable.syncfsRoot.Close())
	}
	errs = append(errs, s.lock.release())
	return errors.Join(errs...)
}
