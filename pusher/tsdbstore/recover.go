package tsdbstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// Recovery of a tenant whose storage vanished (wal.go). The tenant is
// marked broken: its pushes are answered SERVER_ERROR and every Sync fails,
// so the consumer commits nothing it acknowledged since its last commit.
// Once no push, Sync or Querier uses the old TSDB, a fresh one is opened in
// a new directory, what the old TSDB's in-memory head holds is copied into
// it and fsynced, and the fresh TSDB takes the old one's place. The head
// holds every sample since the last block was cut, which includes all that
// was acknowledged since the last successful Sync; its chunks stay readable
// because the old TSDB keeps its files open and mapped even after they were
// unlinked. Blocks already on disk that were removed are gone: those were
// committed long ago and only a backup can bring them back.

// lostLogInterval is how often a tenant's lost storage is logged at most.
const lostLogInterval = 10 * time.Second

// startRecovery marks the tenant broken and recovers it in the background,
// unless a recovery is already running or the store closes; a cause other
// than lost storage is left alone.
func (d *durability) startRecovery(t *tenantDB, cause error) {
	if !errors.Is(cause, errStorageLost) {
		// A failed writeback is not recovered from the head: its files
		// are in place, and the TSDB still writes to them.
		return
	}
	first, recover := d.tenants.markBroken(t)
	if first {
		d.metrics.storageLost.Inc()
	}
	if !recover {
		return
	}
	if ok, suppressed := d.lostLog.Allow(t.id); ok {
		d.logger.Error("tenant storage lost: answering SERVER_ERROR and failing Sync until the tenant is reopened from its in-memory data",
			"tenant", t.id, "dir", t.dir, "err", cause, "suppressed", suppressed)
	}
	go func() {
		defer d.tenants.background.Done()
		d.recoverTenant(t)
	}()
}

// recoverTenant takes the tenant out of use, then replaces its TSDB. On
// failure the tenant stays broken and the next push or Sync tries again.
func (d *durability) recoverTenant(t *tenantDB) {
	d.tenants.takeOutOfUse(t)
	err := d.reopenTenant(t)
	d.tenants.returnToUse(t, err == nil)
	if err != nil {
		d.metrics.recoveries.WithLabelValues("failed").Inc()
		if errors.Is(err, errWriteback) {
			// The fresh TSDB's files failed as well: trying again
			// would stack another TSDB on them.
			d.failWriteback(t.id, err)
		}
		if ok, suppressed := d.lostLog.Allow(t.id); ok {
			d.logger.Error("tenant storage not recovered: retrying on the next push or Sync",
				"tenant", t.id, "dir", t.dir, "err", err, "suppressed", suppressed)
		}
		return
	}
	d.metrics.recoveries.WithLabelValues("ok").Inc()
	d.logger.Warn("tenant storage recovered: reopened with the data of its in-memory head", "tenant", t.id, "dir", t.dir)
}

// reopenTenant opens a fresh TSDB for the tenant, copies the old one's head
// into it, makes that durable and swaps it in. The caller has taken the
// tenant out of use.
func (d *durability) reopenTenant(t *tenantDB) error {
	if err := os.MkdirAll(d.cfg.Path, 0o750); err != nil {
		return fmt.Errorf("recreate storage root: %w", err)
	}
	if err := d.lock.relock(d.cfg.Path); err != nil {
		// The tenants are served either way.
		d.logger.Error("cannot lock the recreated storage root", "path", d.cfg.Path, "err", err)
	}
	if err := d.tenants.paths.check(t.id, t.dir); err != nil {
		return err
	}
	old := t.db
	fresh, err := d.openDB(t)
	if err != nil {
		return err
	}
	if err := copyHead(old, fresh); err != nil {
		return errors.Join(fmt.Errorf("copy the in-memory data of tenant %q: %w", t.id, err), fresh.Close())
	}
	// The old TSDB's files are gone: closing it can only fail to write.
	if err := old.Close(); err != nil {
		d.logger.Debug("closing the lost TSDB", "tenant", t.id, "err", err)
	}
	d.tenants.setDB(t, fresh)
	t.syncMu.Lock()
	defer t.syncMu.Unlock()
	clear(t.syncedFrom)
	t.keepOnly()
	t.dirsSynced = false
	commits := t.commits.Load()
	if err := d.recordIdentity(t); err != nil {
		return err
	}
	st, err := d.syncWAL(t, d.fsyncPath)
	if err != nil {
		return err
	}
	st.commits = commits
	t.record(st)
	t.fsyncNext = false
	return nil
}

// copyHead appends every sample of from's in-memory head to to, in one
// appender: a fresh head accepts any timestamp while it is empty, but once
// committed it would refuse samples far behind its newest one.
func copyHead(from, to *tsdb.DB) error {
	h := from.Head()
	if h.NumSeries() == 0 {
		return nil
	}
	mint, maxt := h.MinTime(), h.MaxTime()
	q, err := tsdb.NewBlockQuerier(tsdb.NewRangeHead(h, mint, maxt), mint, maxt)
	if err != nil {
		return fmt.Errorf("query the head: %w", err)
	}
	defer func() { _ = q.Close() }()
	ctx := context.Background()
	app := to.AppenderV2(ctx)
	all := labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, ".*")
	ss := q.Select(ctx, false, nil, all)
	var it chunkenc.Iterator
	for ss.Next() {
		series := ss.At()
		ls := series.Labels()
		var ref storage.SeriesRef
		it = series.Iterator(it)
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			var p point
			switch vt {
			case chunkenc.ValFloat:
				p.t, p.v = it.At()
			case chunkenc.ValHistogram:
				p.t, p.h = it.AtHistogram(nil)
			case chunkenc.ValFloatHistogram:
				p.t, p.fh = it.AtFloatHistogram(nil)
			default:
				continue
			}
			newRef, err := app.Append(ref, ls, 0, p.t, p.v, p.h, p.fh, storage.AOptions{})
			switch {
			case err == nil:
				ref = newRef
			case classify(err).client:
				// A directory replaced by another TSDB may already hold
				// this time range: what it refuses, it has.
			default:
				_ = app.Rollback()
				return fmt.Errorf("append series %s: %w", ls, err)
			}
		}
		if err := it.Err(); err != nil {
			_ = app.Rollback()
			return fmt.Errorf("read series %s: %w", ls, err)
		}
	}
	if err := ss.Err(); err != nil {
		_ = app.Rollback()
		return fmt.Errorf("select the head: %w", err)
	}
	return app.Commit()
}
