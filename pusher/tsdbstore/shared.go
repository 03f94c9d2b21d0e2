package tsdbstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/prometheus/tsdb"

	"github.com/ferrylabs/ferry/pusher/backend"
)

// The shared tenancy (-storage.tenancy=shared): every tenant's series live
// in one TSDB under <-storage.path>/ferry-shared-tsdb, each labelled
// tenantLabel with its tenant. The store adds the label on append and the
// query views (sharedquery.go) add it to every selection and remove it
// from every answer, so a tenant sees what it would see in a TSDB of its
// own. Everything that works on a tenant's TSDB in the separate tenancy
// (opening, idle closing, Sync, loss detection and recovery) works on the
// shared TSDB as a whole; what is per tenant beside the series is kept
// here: which tenants are active (for -pusher.max-tenants) and how many
// series each has (for -limits.max-series-per-tenant).

// sharedDirName is the directory of the shared TSDB, and the ID it has
// among the store's open TSDBs. validateTenant refuses it as a tenant ID
// in both tenancies, so that it never names a tenant's directory.
const sharedDirName = "ferry-shared-tsdb"

// sharedDir is the directory of the shared TSDB under the storage path.
func (c *Config) sharedDir() string { return filepath.Join(c.Path, sharedDirName) }

// seriesRecountAfter is how old a tenant's series count may be before a
// sample that the count would reject makes it count again: the count only
// grows between counts, while the head drops series that stopped being
// written when it compacts, so a count at the limit may be stale.
const seriesRecountAfter = time.Second

// dbID returns the ID of the TSDB that holds the tenant's series.
func (c *Config) dbID(tenant string) string {
	if c.shared() {
		return sharedDirName
	}
	return tenant
}

// checkTenancy refuses a storage path that holds TSDBs of the other
// tenancy: they would be invisible to this one, and its writes would not
// reach them.
func checkTenancy(cfg Config) error {
	if !cfg.shared() {
		if tenantExists(cfg.sharedDir()) {
			return fmt.Errorf("%s holds a TSDB shared by all tenants (%s): start with -storage.tenancy=%s, or use another -storage.path",
				cfg.Path, sharedDirName, TenancyShared)
		}
		return nil
	}
	entries, err := os.ReadDir(cfg.Path)
	if err != nil {
		return fmt.Errorf("list %s: %w", cfg.Path, err)
	}
	for _, e := range entries {
		if e.IsDir() && e.Name() != sharedDirName && tenantExists(filepath.Join(cfg.Path, e.Name())) {
			return fmt.Errorf("%s holds a TSDB per tenant (tenant %q among them): start with -storage.tenancy=%s, or use another -storage.path",
				cfg.Path, e.Name(), TenancySeparate)
		}
	}
	return nil
}

// activeTenants are, in the shared tenancy, the tenants that wrote within
// the idle timeout: -pusher.max-tenants counts them, as it counts the open
// TSDBs in the separate tenancy.
type activeTenants struct {
	cfg     *Config
	metrics *metrics

	mu   sync.Mutex
	last map[string]time.Time // tenant -> last write
}

// admit records a write for the tenant, and refuses it when the tenant is
// not active and -pusher.max-tenants are. A tenant is active from a write
// until it has written nothing for the idle timeout (forgetIdle), as its
// TSDB would be open in the separate tenancy.
func (a *activeTenants) admit(tenant string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.last[tenant]; !ok && a.cfg.MaxTenants > 0 && len(a.last) >= a.cfg.MaxTenants {
		return capacityError(a.metrics, a.cfg, capacityTenantLimit,
			fmt.Errorf("%w: %d tenants are active, the limit is %d (-pusher.max-tenants); retry once one has been idle for -storage.idle-timeout", errTenantLimit, len(a.last), a.cfg.MaxTenants))
	}
	a.last[tenant] = time.Now()
	return nil
}

// forgetIdle ends the activity of tenants that wrote nothing for the idle
// timeout.
func (a *activeTenants) forgetIdle(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for tenant, last := range a.last {
		if now.Sub(last) > a.cfg.IdleTimeout {
			delete(a.last, tenant)
		}
	}
}

// snapshot returns the active tenants and their last writes.
func (a *activeTenants) snapshot() map[string]time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.last)
}

// seriesCount is a tenant's series in the shared head, as last counted
// plus those created since.
type seriesCount struct {
	n       uint64
	counted time.Time
}

// tenantSeries returns how many series the tenant has in t's head, the
// shared TSDB's, for the series limit, knowing that the caller would
// reject a new series at limit. t.seriesMu is held.
func (t *tenantDB) tenantSeries(tenant string, limit uint64) (uint64, error) {
	c := t.seriesCounts[tenant]
	if c != nil && (c.n < limit || time.Since(c.counted) < seriesRecountAfter) {
		return c.n, nil
	}
	n, err := countSeries(t.db.Head(), tenant)
	if err != nil {
		return 0, err
	}
	if t.seriesCounts == nil {
		t.seriesCounts = map[string]*seriesCount{}
	}
	t.seriesCounts[tenant] = &seriesCount{n: n, counted: time.Now()}
	return n, nil
}

// seriesCreated counts a series the tenant created in t's head since its
// series were counted. t.seriesMu is held.
func (t *tenantDB) seriesCreated(tenant string) {
	if c := t.seriesCounts[tenant]; c != nil {
		c.n++
	}
}

// countSeries counts the tenant's series in the head's index.
func countSeries(head *tsdb.Head, tenant string) (uint64, error) {
	ir, err := head.Index()
	if err != nil {
		return 0, fmt.Errorf("read the head's index: %w", err)
	}
	// The head's index reader holds nothing a Close could fail to release.
	defer func() { _ = ir.Close() }()
	return tenantPostings(ir, tenant)
}

// tenantPostings counts the series of the tenant in an index.
func tenantPostings(ir tsdb.IndexReader, tenant string) (uint64, error) {
	p, err := ir.Postings(context.Background(), tenantLabel, tenant)
	if err != nil {
		return 0, fmt.Errorf("read the postings of tenant %q: %w", tenant, err)
	}
	var n uint64
	for p.Next() {
		n++
	}
	if err := p.Err(); err != nil {
		return 0, fmt.Errorf("read the postings of tenant %q: %w", tenant, err)
	}
	return n, nil
}

// sharedTenantStats counts every tenant's series in the shared head, for
// the metrics and the status page. It reads the whole index once.
func sharedTenantStats(head *tsdb.Head) ([]tenantStat, error) {
	ir, err := head.Index()
	if err != nil {
		return nil, fmt.Errorf("read the head's index: %w", err)
	}
	defer func() { _ = ir.Close() }() // as in countSeries
	tenants, err := ir.SortedLabelValues(context.Background(), tenantLabel, nil)
	if err != nil {
		return nil, fmt.Errorf("read the tenants in the head: %w", err)
	}
	out := make([]tenantStat, 0, len(tenants))
	for _, tenant := range tenants {
		n, err := tenantPostings(ir, tenant)
		if err != nil {
			return nil, err
		}
		out = append(out, tenantStat{tenant: tenant, headSeries: n})
	}
	return out, nil
}

// sharedTenants returns the tenants with series in the shared TSDB, in its
// head or in its blocks, in sorted order.
func (s *Store) sharedTenants() ([]string, error) {
	t, err := s.tenants.acquire(context.Background(), sharedDirName, false)
	if err != nil || t == nil {
		return nil, err
	}
	defer s.tenants.release(t)
	q, err := t.db.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		return nil, fmt.Errorf("query the shared TSDB: %w", err)
	}
	names, _, err := q.LabelValues(context.Background(), tenantLabel, nil)
	err = errors.Join(err, q.Close())
	if err != nil {
		return nil, fmt.Errorf("list the tenants of the shared TSDB: %w", err)
	}
	slices.Sort(names)
	return names, nil
}

// sharedOpenTenantStats reports the tenants with series in the shared
// head, for the metrics collector; none while the shared TSDB is closed.
func (s *Store) sharedOpenTenantStats() []tenantStat {
	t := s.tenants.peekOpen(sharedDirName)
	if t == nil {
		return nil
	}
	defer s.tenants.unpeek(t)
	stats, err := sharedTenantStats(t.db.Head())
	if err != nil {
		s.logger.Error("counting the tenants' series in the shared TSDB", "err", err)
	}
	return stats
}

// testHookEarlyOpen, when set, is called with the storage path before
// the shared TSDB is opened at start: tests hold the opening there.
var testHookEarlyOpen func(path string)

// openSharedEarly opens the shared TSDB in the background when the store
// starts on a path that holds one. Opening replays its WAL, every tenant's
// series (seconds at a million), which would otherwise fall on the first
// write after a restart, with every other write and read waiting behind
// it; the store reports not ready until it is done instead. A fresh path
// is left alone: there is nothing to replay, and the first write creates
// the TSDB.
func (s *Store) openSharedEarly() {
	dir := s.cfg.sharedDir()
	if !s.cfg.shared() || !tenantExists(dir) {
		close(s.replayed)
		return
	}
	// Not shut yet: spawn cannot fail.
	_ = s.tenants.spawn(func() {
		defer close(s.replayed)
		if testHookEarlyOpen != nil {
			testHookEarlyOpen(s.cfg.Path)
		}
		start := time.Now()
		t, err := s.tenants.acquire(context.Background(), sharedDirName, true)
		switch {
		case errors.Is(err, backend.ErrShuttingDown):
		case err != nil:
			s.logger.Error("opening the shared TSDB at start failed: the first write tries again", "path", dir, "err", err)
		default:
			series := t.db.Head().NumSeries()
			s.tenants.release(t)
			s.logger.Info("shared TSDB open: its WAL is replayed", "path", dir, "series", series, "took", time.Since(start).Round(time.Millisecond))
		}
	})
}

// replaying returns an error while the shared TSDB is being opened at
// start (openSharedEarly).
func (s *Store) replaying() error {
	select {
	case <-s.replayed:
		return nil
	default:
		return fmt.Errorf("replaying the write-ahead log of the shared TSDB in %s: writes wait for it", s.cfg.sharedDir())
	}
}
