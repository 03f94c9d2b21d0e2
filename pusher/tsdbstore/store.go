package tsdbstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/wlog"
	"github.com/prometheus/prometheus/util/compression"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher"
)

// maxTenantLen bounds tenant IDs so that <path>/<tenant>/wal/<segment>
// stays far below PATH_MAX and NAME_MAX (255 bytes) on every filesystem.
const maxTenantLen = 150

// walDirs are the write logs of a TSDB that hold samples not yet in a block:
// the WAL, and the WBL for out-of-order samples.
var walDirs = []string{"wal", wlog.WblDirName}

// Store is the TSDB backend: one Prometheus TSDB per tenant. It implements
// pusher.Backend and is safe for concurrent use.
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

	metaMu   sync.Mutex
	metadata map[string]map[string]prompb.MetricMetadata // tenant -> family -> metadata
	// metaFiles persists metadata; see metadatafile.go.
	metaFiles metadataFiles

	stop     chan struct{}
	loopDone chan struct{}
}

var _ pusher.Backend = (*Store)(nil)

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

	// seriesMu serializes the creation of new series so that concurrent
	// pushes cannot both take the last slot under the series limit.
	seriesMu sync.Mutex

	// commits counts successful appender commits; Sync skips a tenant
	// whose count did not change since its last sync, so a commit of one
	// busy consumer does not fsync every idle tenant.
	commits atomic.Uint64

	syncMu        sync.Mutex
	syncedFrom    map[string]int // WAL dir -> first segment not known to be fsynced
	syncedCommits uint64         // commits covered by the last successful sync
	dirsSynced    bool
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
	s := &Store{
		cfg:      cfg,
		logger:   logger,
		tenants:  make(map[string]*tenantDB),
		metadata: make(map[string]map[string]prompb.MetricMetadata),
		stop:     make(chan struct{}),
		loopDone: make(chan struct{}),
	}
	s.idle = sync.NewCond(&s.mu)
	s.metrics = newMetrics(reg, s)
	go s.idleLoop()
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
func (s *Store) Push(ctx context.Context, tenant string, req *prompb.WriteRequest) (pusher.Result, error) {
	if req == nil {
		return pusher.Result{}, nil
	}
	if err := validateTenant(tenant); err != nil {
		n := pusher.Count(req)
		s.metrics.samplesRejected.WithLabelValues(classify(err).code).Add(float64(n))
		return pusher.Result{Rejected: n}, &pusher.ClientError{
			Reason: err.Error(), Cause: err,
		}
	}
	if err := ctx.Err(); err != nil {
		return pusher.Result{}, requestError("push", err)
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return pusher.Result{}, requestError("push", pusher.ErrShuttingDown)
	}
	s.storeMetadata(tenant, req.Metadata)
	if pusher.Count(req) == 0 {
		// Nothing for the TSDB: do not open (or create) it for metadata alone.
		return pusher.Result{}, nil
	}
	t, err := s.acquire(ctx, tenant, true)
	if err != nil {
		return pusher.Result{}, requestError("push", err)
	}
	defer s.release(t)
	return s.appendRequest(ctx, t, req)
}

// acquire returns the tenant's open TSDB with a reference the caller must
// release. With create false it returns nil, nil for a tenant that has no
// TSDB on disk, so that reads never create directories.
func (s *Store) acquire(ctx context.Context, id string, create bool) (*tenantDB, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, pusher.ErrShuttingDown
		}
		t := s.tenants[id]
		if t == nil {
			dir := filepath.Join(s.cfg.Path, id)
			if !create && !tenantExists(dir) {
				s.mu.Unlock()
				return nil, nil
			}
			t = &tenantDB{id: id, dir: dir, ready: make(chan struct{}), refs: 1, syncedFrom: map[string]int{}}
			s.tenants[id] = t
			s.mu.Unlock()
			// Opening replays the WAL and may take long; other tenants
			// must not wait for it, so it runs outside s.mu.
			db, err := s.openDB(t)
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

// release drops a reference taken by acquire and marks the tenant used now,
// which postpones its idle close.
func (s *Store) release(t *tenantDB) {
	s.mu.Lock()
	t.refs--
	t.lastUsed = time.Now()
	if t.refs == 0 {
		s.idle.Broadcast()
	}
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
	// Every tenant DB runs its own compaction; spreading them out keeps
	// tenants opened together from compacting at the same moment.
	opts.EnableDelayedCompaction = true

	db, err := tsdb.Open(t.dir, s.logger.With("tenant", t.id), nil, opts, nil)
	if err != nil {
		s.metrics.tenantOpenFailures.Inc()
		return nil, fmt.Errorf("open TSDB of tenant %q: %w", t.id, err)
	}
	s.metrics.tenantOpens.Inc()
	s.logger.Debug("opened tenant TSDB", "tenant", t.id, "dir", t.dir)
	return db, nil
}

// idleLoop closes tenants idle for longer than the idle timeout until Close.
func (s *Store) idleLoop() {
	defer close(s.loopDone)
	if s.cfg.IdleTimeout <= 0 {
		<-s.stop
		return
	}
	// Checking a few times per timeout bounds how long past the timeout a
	// tenant stays open, at the cost of scanning the tenant map.
	interval := min(max(s.cfg.IdleTimeout/4, 10*time.Millisecond), time.Minute)
	ticker := time.NewTicker(interval)
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
	for _, t := range s.tenants {
		if t.refs == 0 && t.closing == nil && t.db != nil && now.Sub(t.lastUsed) > s.cfg.IdleTimeout {
			t.closing = make(chan struct{})
			victims = append(victims, t)
		}
	}
	s.mu.Unlock()
	for _, t := range victims {
		if err := s.closeTenant(t, "idle"); err != nil {
			s.logger.Error("closing idle tenant TSDB", "tenant", t.id, "err", err)
		} else {
			s.logger.Debug("closed idle tenant TSDB", "tenant", t.id)
		}
		s.mu.Lock()
		delete(s.tenants, t.id)
		close(t.closing)
		s.mu.Unlock()
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
	for _, sub := range walDirs {
		if serr := syncDir(filepath.Join(t.dir, sub)); serr != nil && !errors.Is(serr, fs.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("fsync %s of tenant %q: %w", sub, t.id, serr))
		}
	}
	s.metrics.tenantCloses.WithLabelValues(reason).Inc()
	return err
}

// Sync makes everything committed before the call durable: for every open
// tenant it fsyncs the WAL (and out-of-order WBL) segments written since the
// tenant's previous Sync, and their directories. It returns the number of
// tenants synced.
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
	start := time.Now()
	var open []*tenantDB
	var closing []chan struct{}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, requestError("sync", pusher.ErrShuttingDown)
	}
	for _, t := range s.tenants {
		switch {
		case t.closing != nil:
			closing = append(closing, t.closing)
		case t.db != nil:
			t.refs++
			open = append(open, t)
		}
		// A tenant still opening has no commits yet: nothing to sync.
	}
	s.mu.Unlock()

	var errs []error
	synced := 0
	for i, t := range open {
		if err := ctx.Err(); err != nil {
			for _, rest := range open[i:] {
				s.release(rest)
			}
			errs = append(errs, err)
			break
		}
		did, err := s.syncTenant(t)
		if err != nil {
			errs = append(errs, err)
		} else if did {
			synced++
		}
		s.release(t)
	}
	// Hook: metadata files (metadatafile.go).
	if err := s.persistMetadata(); err != nil {
		errs = append(errs, err)
	}
	for _, ch := range closing {
		select {
		case <-ch:
		case <-ctx.Done():
			errs = append(errs, ctx.Err())
		}
		if ctx.Err() != nil {
			break
		}
	}
	s.metrics.syncDuration.Observe(time.Since(start).Seconds())
	if err := errors.Join(errs...); err != nil {
		s.metrics.syncFailures.Inc()
		return synced, requestError("sync", err)
	}
	return synced, nil
}

// syncTenant fsyncs what the tenant committed since its last sync, and
// reports whether there was anything.
func (s *Store) syncTenant(t *tenantDB) (bool, error) {
	t.syncMu.Lock()
	defer t.syncMu.Unlock()
	// Read the count before syncing: the sync covers at least those
	// commits; any that land meanwhile are synced next time.
	commits := t.commits.Load()
	if commits == t.syncedCommits && t.dirsSynced {
		return false, nil
	}
	if err := s.syncWAL(t); err != nil {
		return false, err
	}
	t.syncedCommits = commits
	return true, nil
}

// syncWAL fsyncs the tenant's WAL segments written since the last sync and
// their directories, and once the tenant's own directory entries.
func (s *Store) syncWAL(t *tenantDB) error {
	for _, sub := range walDirs {
		dir := filepath.Join(t.dir, sub)
		segs, err := segmentIndexes(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue // No WBL: out-of-order samples were never enabled.
		}
		if err != nil {
			return fmt.Errorf("list %s of tenant %q: %w", sub, t.id, err)
		}
		from := t.syncedFrom[sub]
		last := from
		for _, seg := range segs {
			if seg < from {
				continue
			}
			err := syncFile(wlog.SegmentName(dir, seg))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("fsync %s segment %d of tenant %q: %w", sub, seg, t.id, err)
			}
			last = seg
		}
		// A segment created after the listing is not in segs, but its
		// directory entry is made durable here and its data is fsynced by
		// the next Sync, which starts at last.
		if err := syncDir(dir); err != nil {
			return fmt.Errorf("fsync %s directory of tenant %q: %w", sub, t.id, err)
		}
		t.syncedFrom[sub] = last
	}
	if !t.dirsSynced {
		// The tenant's directory and its entry in the store directory were
		// created by the first write; make them durable once.
		if err := syncDir(t.dir); err != nil {
			return fmt.Errorf("fsync directory of tenant %q: %w", t.id, err)
		}
		if err := syncDir(s.cfg.Path); err != nil {
			return fmt.Errorf("fsync store directory: %w", err)
		}
		t.dirsSynced = true
	}
	return nil
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
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	return errors.Join(err, f.Close())
}

// syncDir fsyncs a directory, making the creation of its entries durable.
func syncDir(path string) error {
	return syncFile(path)
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

	s.mu.Lock()
	for s.busy() {
		s.idle.Wait()
	}
	tenants := slices.Collect(maps.Values(s.tenants))
	clear(s.tenants)
	s.mu.Unlock()

	// Hook: metadata files (metadatafile.go).
	errs := []error{s.persistMetadata()}
	for _, t := range tenants {
		errs = append(errs, s.closeTenant(t, "shutdown"))
	}
	return errors.Join(errs...)
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

// Queryable returns the tenant's data for queries. Each Querier it creates
// holds the tenant's TSDB open until the Querier is closed; a tenant that
// never wrote gets an empty Querier and no directory is created. A Querier
// of a closed Store fails with a server error.
func (s *Store) Queryable(tenant string) storage.Queryable {
	return storage.QueryableFunc(func(mint, maxt int64) (storage.Querier, error) {
		if err := validateTenant(tenant); err != nil {
			return storage.NoopQuerier(), nil
		}
		t, err := s.acquire(context.Background(), tenant, false)
		if err != nil {
			return nil, requestError("query", err)
		}
		if t == nil {
			return storage.NoopQuerier(), nil
		}
		q, err := t.db.Querier(mint, maxt)
		if err != nil {
			s.release(t)
			return nil, requestError("query", err)
		}
		return &releasingQuerier{Querier: q, release: func() { s.release(t) }}, nil
	})
}

// releasingQuerier releases the tenant's reference when the Querier closes.
type releasingQuerier struct {
	storage.Querier
	once    sync.Once
	release func()
}

func (q *releasingQuerier) Close() error {
	err := q.Querier.Close()
	q.once.Do(q.release)
	return err
}

// ExemplarQueryable returns the tenant's exemplars for queries. Exemplars
// live in memory only: a tenant whose TSDB is closed has exactly those its
// WAL replay restores when it is opened.
func (s *Store) ExemplarQueryable(tenant string) storage.ExemplarQueryable {
	return exemplarQueryableFunc(func(ctx context.Context) (storage.ExemplarQuerier, error) {
		if err := validateTenant(tenant); err != nil {
			return emptyExemplarQuerier{}, nil
		}
		t, err := s.acquire(ctx, tenant, false)
		if err != nil {
			return nil, requestError("exemplar query", err)
		}
		if t == nil {
			return emptyExemplarQuerier{}, nil
		}
		// The exemplar querier reads the in-memory circular buffer, which
		// stays valid after the DB closes, so no reference is kept.
		defer s.release(t)
		q, err := t.db.ExemplarQuerier(ctx)
		if err != nil {
			return nil, requestError("exemplar query", err)
		}
		return q, nil
	})
}

type exemplarQueryableFunc func(ctx context.Context) (storage.ExemplarQuerier, error)

func (f exemplarQueryableFunc) ExemplarQuerier(ctx context.Context) (storage.ExemplarQuerier, error) {
	return f(ctx)
}

type emptyExemplarQuerier struct{}

func (emptyExemplarQuerier) Select(int64, int64, ...[]*labels.Matcher) ([]exemplar.QueryResult, error) {
	return nil, nil
}

// Tenants returns the IDs of all tenants with a TSDB, open or on disk, in
// sorted order.
func (s *Store) Tenants() []string {
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

// storeMetadata keeps the latest metadata of each metric family. Sync
// persists it (metadatafile.go).
func (s *Store) storeMetadata(tenant string, mds []prompb.MetricMetadata) {
	if len(mds) == 0 {
		return
	}
	dropped := 0
	s.metaMu.Lock()
	s.loadMetadataLocked(tenant) // Hook: metadata files (metadatafile.go).
	m := s.metadata[tenant]
	if m == nil {
		m = make(map[string]prompb.MetricMetadata)
		s.metadata[tenant] = m
	}
	for _, md := range mds {
		if md.MetricFamilyName == "" {
			continue
		}
		if _, ok := m[md.MetricFamilyName]; !ok && s.cfg.MaxMetadataPerTenant > 0 && len(m) >= s.cfg.MaxMetadataPerTenant {
			dropped++
			continue
		}
		if old, ok := m[md.MetricFamilyName]; ok && old.Type == md.Type && old.Help == md.Help && old.Unit == md.Unit {
			continue // The usual periodic resend: nothing to persist.
		}
		// Clone so that the map does not pin the request's memory.
		m[strings.Clone(md.MetricFamilyName)] = prompb.MetricMetadata{
			Type:             md.Type,
			MetricFamilyName: strings.Clone(md.MetricFamilyName),
			Help:             strings.Clone(md.Help),
			Unit:             strings.Clone(md.Unit),
		}
		s.metadataChangedLocked(tenant) // Hook: metadata files (metadatafile.go).
	}
	s.metaMu.Unlock()
	if dropped > 0 {
		s.metrics.metadataDropped.Add(float64(dropped))
	}
}

// Metadata returns a copy of the latest metadata per metric family the
// tenant sent, including before a restart.
func (s *Store) Metadata(tenant string) map[string]prompb.MetricMetadata {
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	s.loadMetadataLocked(tenant) // Hook: metadata files (metadatafile.go).
	return maps.Clone(s.metadata[tenant])
}

type tenantStat struct {
	tenant     string
	headSeries uint64
}

// openTenantStats reports the open tenants for the metrics collector.
func (s *Store) openTenantStats() []tenantStat {
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
