package tsdbstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/prometheus/prometheus/tsdb/wlog"
)

// A tenant's write logs on disk: which of their segments and directories
// a sync makes durable (syncWAL), found by listing as little as it can.

// syncWAL makes durable, through op, the tenant's WAL segments written since
// the last sync and, when they gained a segment, their directories; and
// once the tenant's own directory entries. It returns the tenant's state
// after that, without recording it. The caller holds t.syncMu.
//
// t.syncedFrom holds, for each write log listed before, the newest segment
// of that listing: the segments before it are fsynced, and the directory
// entries of all up to it are durable. A write log without an entry was not
// listed yet (a new or recovered tenant, or no WBL).
func (d *durability) syncWAL(t *tenantDB, op func(path string) error) (*walState, error) {
	st := &walState{syncedFrom: make(map[string]int, len(walDirs)), dirsSynced: t.dirsSynced}
	for _, sub := range walDirs {
		dir := filepath.Join(t.dir, sub)
		last, listed := t.syncedFrom[sub]
		if listed {
			done, err := syncCurrentSegment(dir, last, op)
			if err != nil {
				return nil, fmt.Errorf("fsync %s segment %d of tenant %q: %w", sub, last, t.id, err)
			}
			if done {
				st.syncedFrom[sub] = last
				continue
			}
		}
		segs, err := segmentIndexes(dir)
		if errors.Is(err, fs.ErrNotExist) && sub != "wal" {
			continue // No WBL: out-of-order samples were never enabled.
		}
		if errors.Is(err, fs.ErrNotExist) {
			// Every open TSDB has a WAL: without it nothing it
			// acknowledged is on disk.
			return nil, fmt.Errorf("%w: tenant %q: %s is missing", errStorageLost, t.id, dir)
		}
		if err != nil {
			return nil, fmt.Errorf("list %s of tenant %q: %w", sub, t.id, err)
		}
		if listed && (len(segs) == 0 || segs[len(segs)-1] < last) {
			// A truncation never removes the newest segment.
			return nil, fmt.Errorf("%w: tenant %q: segment %d of %s vanished", errStorageLost, t.id, last, dir)
		}
		if !listed && sub != "wal" && st.dirsSynced {
			// A WBL created after the tenant's directory was fsynced
			// (out-of-order samples enabled later) is a new entry in it.
			st.dirsSynced = false
		}
		newest := last
		for _, seg := range segs {
			if seg < last {
				continue
			}
			err := op(wlog.SegmentName(dir, seg))
			if errors.Is(err, fs.ErrNotExist) && seg == segs[len(segs)-1] {
				// Older segments may be removed by a WAL truncation
				// meanwhile; the newest one never is.
				return nil, fmt.Errorf("%w: tenant %q: segment %d of %s vanished", errStorageLost, t.id, seg, dir)
			}
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("fsync %s segment %d of tenant %q: %w", sub, seg, t.id, err)
			}
			newest = seg
		}
		// Only new segments need their directory entries made durable;
		// a removed one (WAL truncation) may come back after a crash, and
		// replay skips segments its checkpoint covers. A segment created
		// after the listing is not in segs, but the next sync finds it
		// after last (see syncCurrentSegment) and fsyncs the directory
		// again.
		if !listed || newest > last {
			if err := op(dir); err != nil {
				return nil, fmt.Errorf("fsync %s directory of tenant %q: %w", sub, t.id, err)
			}
		}
		st.syncedFrom[sub] = newest
	}
	if !st.dirsSynced {
		// The tenant's directory and its entry in the store directory were
		// created by the first write; make them durable once.
		if err := op(t.dir); err != nil {
			return nil, fmt.Errorf("fsync directory of tenant %q: %w", t.id, err)
		}
		if err := op(d.cfg.Path); err != nil {
			return nil, fmt.Errorf("fsync store directory: %w", err)
		}
		st.dirsSynced = true
	}
	return st, nil
}

// syncCurrentSegment is the common case of a sync, without listing the
// write log: when segment last+1 does not exist, last is still the newest
// segment and the only one that can hold records not fsynced yet, and no
// segment entry was added to the directory since it was listed. That holds
// because a write log creates its segments one after the other, each
// numbered one above the previous (wlog.WL.nextSegment), and never creates
// last+2 before last+1; a truncation removes only segments older than the
// one it starts, so it never removes last+1 without last+2 existing, nor
// the newest segment. A commit that returned before this sync started
// wrote to the segment current then, which is at most last when last+1
// does not exist even now. It reports false when the write log must be
// listed: a newer segment exists, or last was removed meanwhile.
func syncCurrentSegment(dir string, last int, op func(path string) error) (bool, error) {
	_, err := os.Lstat(wlog.SegmentName(dir, last+1))
	switch {
	case err == nil:
		return false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return false, err
	}
	err = op(wlog.SegmentName(dir, last))
	if errors.Is(err, fs.ErrNotExist) {
		// Removed by a truncation after last+1 and later ones were
		// created and removed too, or the directory is gone: the listing
		// tells which.
		return false, nil
	}
	return err == nil, err
}

// fsyncPath fsyncs a file or directory, through the test hook if set.
func (d *durability) fsyncPath(path string) error {
	if f := d.testFsync; f != nil {
		return f(path)
	}
	return syncFile(path)
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
// A failed fsync is an errWriteback.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = writebackError(f.Sync())
	return errors.Join(err, f.Close())
}

// syncDir fsyncs a directory, making the creation of its entries durable.
func syncDir(path string) error {
	return syncFile(path)
}
