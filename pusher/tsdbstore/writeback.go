package tsdbstore

import (
	"errors"
	"fmt"
	"os"
	"slices"
)

// A failed fsync cannot be retried. When the kernel fails to write a dirty
// page back it reports the error once, to the fsync that comes next (or to
// each descriptor opened before the failure), and marks the page clean:
// the data is dropped from the page cache and a later fsync of the same
// file returns success without writing it. So after a failed fsync of a
// tenant's WAL, what it acknowledged since its last successful Sync may be
// missing on disk for good, and no later Sync may say otherwise, or the
// consumers would commit offsets past samples that exist nowhere.
//
// The tenant is therefore failed until the pusher restarts: its pushes are
// answered SERVER_ERROR and every Sync fails, so no consumer commits
// anything after its last successful Sync. A restart replays what the WAL
// holds and the consumers send everything after their committed offsets
// again, which covers all that may have been lost. The same holds when
// closing an idle tenant fails with commits not yet synced: its head, the
// only other copy, is gone with the close.
//
// The kernel reports a writeback error to every descriptor opened before
// it, but to one opened after it only if nobody saw the error yet. The
// TSDB fsyncs a WAL segment itself when it moves on to the next one, and
// only logs a failure; a descriptor the Sync opened afterwards would then
// fsync with success. So the newest segment of each write log is fsynced
// through a descriptor kept open from one Sync to the next, opened before
// most of what the segment will hold was written.

// errWriteback marks the failure of fsync(2) on a tenant's storage, or of
// closing a tenant's TSDB (which fsyncs) before its commits were synced.
var errWriteback = errors.New("writing the tenant's storage back to disk failed: what it acknowledged since the last successful Sync may not be on disk; " +
	"the tenant's pushes and every Sync fail until the pusher is restarted, and the consumers then send those records again")

// writebackError wraps the error of an fsync(2) call as errWriteback. An
// error opening the file is not one: it says nothing of the data.
func writebackError(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", errWriteback, err)
}

// failWriteback fails the tenant for good (see above): it logs the failure
// once and counts it. cause is kept as an errWriteback.
func (d *durability) failWriteback(tenant string, cause error) {
	if !errors.Is(cause, errWriteback) {
		cause = writebackError(cause)
	}
	d.failedMu.Lock()
	_, known := d.writebackFailed[tenant]
	if !known {
		if d.writebackFailed == nil {
			d.writebackFailed = map[string]error{}
		}
		d.writebackFailed[tenant] = cause
	}
	d.failedMu.Unlock()
	if known {
		return
	}
	d.metrics.writebackFailures.Inc()
	d.logger.Error("tenant storage failed to write back: failing the tenant's pushes and every Sync until the pusher is restarted",
		"tenant", tenant, "path", d.cfg.Path, "err", cause)
}

// writebackFailures returns an error while any tenant failed to write
// back: every Sync fails with it.
func (d *durability) writebackFailures() error {
	d.failedMu.Lock()
	n := len(d.writebackFailed)
	d.failedMu.Unlock()
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%w (%d tenant(s))", errWriteback, n)
}

// keptFile is an open descriptor of a WAL segment and the file it was
// opened on.
type keptFile struct {
	f  *os.File
	fi os.FileInfo
}

// fsyncKept fsyncs path for the tenant through its kept descriptor of that
// file, or through a new one it keeps; the caller holds t.syncMu. A path
// that no longer names the kept file (removed, replaced) fails as opening
// it would, with fs.ErrNotExist when it is gone.
func (d *durability) fsyncKept(t *tenantDB, path string) error {
	if f := d.testFsync; f != nil {
		return f(path)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return syncFile(path)
	}
	k, ok := t.kept[path]
	if !ok || !os.SameFile(k.fi, fi) {
		if ok {
			t.dropKept(path)
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		k = keptFile{f: f, fi: fi}
		if t.kept == nil {
			t.kept = map[string]keptFile{}
		}
		t.kept[path] = k
	}
	return writebackError(k.f.Sync())
}

// keepOnly closes the kept descriptors but those of paths; the caller
// holds t.syncMu.
func (t *tenantDB) keepOnly(paths ...string) {
	for p := range t.kept {
		if !slices.Contains(paths, p) {
			t.dropKept(p)
		}
	}
}

// dropKept closes the kept descriptor of path; the caller holds t.syncMu.
func (t *tenantDB) dropKept(path string) {
	// Read-only: closing reports nothing of the data.
	_ = t.kept[path].f.Close()
	delete(t.kept, path)
}

// closeKept closes every kept descriptor of the tenant, once its TSDB is
// closed or replaced.
func (t *tenantDB) closeKept() {
	t.syncMu.Lock()
	defer t.syncMu.Unlock()
	t.keepOnly()
}
