package tsdbstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// The Store, the backend's facade: New puts its owners together, Push and
// PushBatch take the writes in (they check the tenant and the store, hold
// the tenant's TSDB open and usable, and hand the requests to the writer,
// batch.go), and Close ends it all.

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
	// write is the write path (batch.go).
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

// Push appends req to the tenant's TSDB; see the package documentation for
// how errors are reported.
//
// Identical replays are accepted: a sample the TSDB refuses as out of order
// or too old is looked up, and counted as accepted when the same value is
// already stored at that timestamp. So a request retried after a server
// error, or re-read from Kafka after a crash, is acknowledged OK again.
func (s *Store) Push(ctx context.Context, tenant string, req *prompb.WriteRequest) (backend.Result, error) {
	if req == nil {
		return backend.Result{}, nil
	}
	if err := validateTenant(tenant); err != nil {
		n := backend.Count(req)
		s.metrics.samplesRejected.WithLabelValues(classify(err).code).Add(float64(n))
		return backend.Result{Rejected: n}, &backend.ClientError{
			Reason: err.Error(), Cause: err,
		}
	}
	if err := ctx.Err(); err != nil {
		return backend.Result{}, requestError("push", err)
	}
	if s.tenants.isClosed() {
		return backend.Result{}, requestError("push", backend.ErrShuttingDown)
	}
	s.meta.store(tenant, req.Metadata)
	n := backend.Count(req)
	if n == 0 {
		// Nothing for the TSDB: do not open (or create) it for metadata alone.
		return backend.Result{}, nil
	}
	t, err := s.tenants.acquireForWrite(ctx, tenant)
	if err != nil {
		if c := classify(err); c.client {
			s.metrics.samplesRejected.WithLabelValues(c.code).Add(float64(n))
			return backend.Result{Rejected: n}, requestError("push", err)
		}
		return backend.Result{}, requestError("push", err)
	}
	// Appending to a TSDB whose files are gone would be acknowledged and
	// lost: check first, and let a Sync catch a loss that happens after.
	if err := s.durable.usable(t); err != nil {
		s.tenants.release(t)
		s.durable.startRecovery(t, err)
		return backend.Result{}, requestError("push", err)
	}
	defer s.tenants.release(t)
	return s.write.appendRequest(ctx, t, tenant, req)
}

var _ backend.BatchPusher = (*Store)(nil)

// PushBatch appends reqs, requests of one tenant, in one batch (one
// appender) with one commit (backend.BatchPusher): a commit costs a WAL record and its write
// whatever its size, which for small requests is most of their cost.
//
// Each request is answered as Push would have answered it after the ones
// before it were committed. The TSDB checks a sample against committed
// data only, so the checks that depend on the requests before it are made
// here (appendValue): a series' sample not newer than a pending one of an
// earlier request is refused as the TSDB would have refused it, and the
// head's lower bound moves with the pending samples as it would have with
// committed ones. Two cases are not followed that way; the requests before
// are committed first instead, and the rest go on in a new appender:
// exemplars after exemplars (the exemplar storage checks against its
// committed exemplars only) and any request when the TSDB has an
// out-of-order window (its commit sorts pending samples into the
// out-of-order head by rules that depend on the order of commits).
func (s *Store) PushBatch(ctx context.Context, tenant string, reqs []*prompb.WriteRequest, out []backend.Outcome) error {
	if len(reqs) == 1 {
		// Nothing to share: Push is the reference.
		res, err := s.Push(ctx, tenant, reqs[0])
		if err != nil && !backend.IsClientError(err) {
			return err
		}
		out[0] = backend.Outcome{Result: res, Err: err}
		return nil
	}
	for i := range out {
		out[i] = backend.Outcome{}
	}
	if err := validateTenant(tenant); err != nil {
		s.write.rejectAll(reqs, out, err, &backend.ClientError{Reason: err.Error(), Cause: err}, false)
		return nil
	}
	if err := ctx.Err(); err != nil {
		return requestError("push", err)
	}
	if s.tenants.isClosed() {
		return requestError("push", backend.ErrShuttingDown)
	}
	// Counted once here, for the writer too, which skips the requests
	// without samples.
	counts := make([]int64, len(reqs))
	samples := false
	for i, req := range reqs {
		if req != nil {
			s.meta.store(tenant, req.Metadata)
			counts[i] = backend.Count(req)
			samples = samples || counts[i] > 0
		}
	}
	if !samples {
		// Nothing for the TSDB: do not open (or create) it for metadata alone.
		return nil
	}
	t, err := s.tenants.acquireForWrite(ctx, tenant)
	if err != nil {
		if classify(err).client {
			s.write.rejectAll(reqs, out, err, requestError("push", err), true)
			return nil
		}
		return requestError("push", err)
	}
	// Appending to a TSDB whose files are gone would be acknowledged and
	// lost: check first, and let a Sync catch a loss that happens after.
	if err := s.durable.usable(t); err != nil {
		s.tenants.release(t)
		s.durable.startRecovery(t, err)
		return requestError("push", err)
	}
	defer s.tenants.release(t)
	return s.write.appendBatch(ctx, t, tenant, reqs, counts, out)
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
