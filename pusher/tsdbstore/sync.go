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
	"time"

	"github.com/prometheus/prometheus/tsdb/wlog"

	"github.com/ferrylabs/ferry/pusher/backend"
)

// Durability: Sync makes every sample pushed before it durable by fsyncing
// each open tenant's write logs, which is what lets the consumer commit
// Kafka offsets after it.

// walDirs are the write logs of a TSDB that hold samples not yet in a block:
// the WAL, and the WBL for out-of-order samples.
var walDirs = []string{"wal", wlog.WblDirName}

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
		return 0, requestError("sync", backend.ErrShuttingDown)
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
		s.release(t)
		if err != nil {
			errs = append(errs, err)
			if errors.Is(err, errStorageLost) {
				s.startRecovery(t, err)
			}
		} else if did {
			synced++
		}
	}
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
	// A tenant whose storage was lost holds acknowledged data in memory
	// only until its recovery wrote it anew: nothing may be committed
	// before that.
	s.mu.Lock()
	broken := s.broken
	s.mu.Unlock()
	if broken > 0 {
		errs = append(errs, fmt.Errorf("%w: %d tenant(s) not recovered yet", errStorageLost, broken))
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
	// Checked even when nothing was committed since the last sync: a
	// tenant whose files vanished holds its data in memory only.
	if err := s.usable(t); err != nil {
		return false, err
	}
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
		if errors.Is(err, fs.ErrNotExist) && sub != "wal" {
			continue // No WBL: out-of-order samples were never enabled.
		}
		if errors.Is(err, fs.ErrNotExist) {
			// Every open TSDB has a WAL: without it nothing it
			// acknowledged is on disk.
			return fmt.Errorf("%w: tenant %q: %s is missing", errStorageLost, t.id, dir)
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
			if errors.Is(err, fs.ErrNotExist) && seg == segs[len(segs)-1] {
				// Older segments may be removed by a WAL truncation
				// meanwhile; the newest one never is.
				return fmt.Errorf("%w: tenant %q: segment %d of %s vanished", errStorageLost, t.id, seg, dir)
			}
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
