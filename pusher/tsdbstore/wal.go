package tsdbstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"github.com/prometheus/prometheus/tsdb/wlog"
)

// A tenant's write logs on disk: whether the tenant may still be written
// and synced (usable), its directories being the ones its TSDB opened
// (identity); and the sync of a tenant (syncTenant): which of its
// segments and directories to make durable (syncWAL), found by listing as
// little as it can, fsynced through descriptors kept from one sync to the
// next (fsyncKept).

// walDirs are the write logs of a TSDB that hold samples not yet in a block:
// the WAL, and the WBL for out-of-order samples.
var walDirs = []string{"wal", wlog.WblDirName}

// Identity. Durability is checked, not assumed: a tenant's TSDB writes
// through file descriptors that keep working after its directory was
// removed or replaced, so a vanished directory shows in no write error.
// The store records the identity (device and inode) of the storage root
// and of each open tenant's directory, and checks them before every
// append and Sync.

// errStorageLost fails a push or Sync of a tenant whose directory, WAL or
// storage root vanished or was replaced under the open TSDB: what it
// acknowledged cannot be proven durable. It is a server error, so nothing
// is committed past it, and it starts the tenant's recovery (recover.go).
var errStorageLost = errors.New("tenant storage vanished or was replaced under the open TSDB")

// fileID identifies a file or directory for as long as it exists.
type fileID struct {
	dev, ino uint64
}

// statID returns the identity of path; fs.ErrNotExist when it is gone.
func statID(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	if !fi.IsDir() {
		return fileID{}, fmt.Errorf("%s: %w", path, syscall.ENOTDIR)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, fmt.Errorf("%s: no device and inode on this platform", path)
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, nil //nolint:unconvert // Dev is not uint64 on every OS
}

// recordIdentity remembers the identities of the storage root and of the
// tenant's directory right after its TSDB opened them.
func (d *durability) recordIdentity(t *tenantDB) error {
	root, err := statID(d.cfg.Path)
	if err != nil {
		return fmt.Errorf("stat storage root: %w", err)
	}
	dir, err := statID(t.dir)
	if err != nil {
		return fmt.Errorf("stat directory of tenant %q: %w", t.id, err)
	}
	wal, err := statID(filepath.Join(t.dir, "wal"))
	if err != nil {
		return fmt.Errorf("stat WAL directory of tenant %q: %w", t.id, err)
	}
	t.rootID, t.dirID, t.walID = root, dir, wal
	return nil
}

// usable fails for a tenant whose storage failed to write back (sync.go)
// or is lost: marked broken, or found so now (checkIdentity). Every
// append and every sync of the tenant asks it first.
func (d *durability) usable(t *tenantDB) error {
	d.failedMu.Lock()
	failed := d.writebackFailed[t.id]
	d.failedMu.Unlock()
	broken := t.broken.Load()
	if failed != nil {
		return fmt.Errorf("tenant %q: %w", t.id, failed)
	}
	if broken {
		return fmt.Errorf("%w: tenant %q is being reopened", errStorageLost, t.id)
	}
	return d.checkIdentity(t)
}

// checkIdentity verifies that the tenant's TSDB still writes where it
// opened: the storage root and the tenant directory are the ones it
// opened, and its WAL directory exists.
//
// It runs before every append, so the common case is one stat(2): the WAL
// directory found at its path with the identity it had when the TSDB
// opened it. The path resolves through the storage root and the tenant
// directory, so a removed or replaced one of those (a fresh directory has
// fresh inodes below it) makes that stat fail or differ; only then are the
// three directories checked one by one, to say which was lost. Three
// stats per append were a tenth of the pusher's CPU at 1,000 tenants.
func (d *durability) checkIdentity(t *tenantDB) error {
	if wal, err := statID(filepath.Join(t.dir, "wal")); err == nil && wal == t.walID {
		return nil
	}
	return d.diagnoseIdentity(t)
}

// diagnoseIdentity is checkIdentity's check directory by directory.
func (d *durability) diagnoseIdentity(t *tenantDB) error {
	lost := func(format string, args ...any) error {
		return fmt.Errorf("%w: tenant %q: %s", errStorageLost, t.id, fmt.Sprintf(format, args...))
	}
	root, err := statID(d.cfg.Path)
	switch {
	case err != nil:
		return lost("storage root %s: %v", d.cfg.Path, err)
	case root != t.rootID:
		return lost("storage root %s was replaced", d.cfg.Path)
	}
	dir, err := statID(t.dir)
	switch {
	case err != nil:
		return lost("directory %s: %v", t.dir, err)
	case dir != t.dirID:
		return lost("directory %s was replaced", t.dir)
	}
	wal, err := statID(filepath.Join(t.dir, "wal"))
	switch {
	case err != nil:
		return lost("WAL directory: %v", err)
	case wal != t.walID:
		return lost("WAL directory %s was replaced", filepath.Join(t.dir, "wal"))
	}
	return nil
}

// A tenant's sync: its write logs' segments written since the last sync,
// and their directories when they gained one, made durable, and the
// tenant's state recorded.

// walState is what a sync of a tenant made durable: the commits it covers,
// and the fields of tenantDB.syncedFrom and dirsSynced after it.
type walState struct {
	commits    uint64
	syncedFrom map[string]int
	dirsSynced bool
}

// record makes st the tenant's durable point; the caller holds t.syncMu.
func (t *tenantDB) record(st *walState) {
	t.syncedCommits = st.commits
	t.syncedFrom = st.syncedFrom
	t.dirsSynced = st.dirsSynced
}

// syncTenant syncs what the tenant committed since its last sync, and
// reports whether there was anything. With syncfs it fsyncs nothing when
// the round's syncfs covers the tenant: it checks the files a fsync would
// have found and returns the state to record once the syncfs succeeded
// (pending); else it fsyncs file by file and records the state itself.
func (d *durability) syncTenant(t *tenantDB, syncfs bool) (pending *walState, did bool, err error) {
	t.syncMu.Lock()
	defer t.syncMu.Unlock()
	// Read the count before syncing: the sync covers at least those
	// commits; any that land meanwhile are synced next time.
	commits := t.commits.Load()
	// Checked even when nothing was committed since the last sync: a
	// tenant whose files vanished holds its data in memory only.
	if err := d.usable(t); err != nil {
		return nil, false, err
	}
	if commits == t.syncedCommits && t.dirsSynced {
		return nil, false, nil
	}
	byFile := !syncfs || t.fsyncNext || !d.onSyncfsFilesystem(t)
	op := d.checkPath
	if byFile {
		op = func(path string) error { return d.fsyncKept(t, path) }
	}
	st, err := d.syncWAL(t, op)
	if err != nil {
		return nil, false, err
	}
	st.commits = commits
	if !byFile {
		return st, false, nil
	}
	t.record(st)
	t.fsyncNext = false
	newest := make([]string, 0, len(st.syncedFrom))
	for sub, seg := range st.syncedFrom {
		newest = append(newest, wlog.SegmentName(filepath.Join(t.dir, sub), seg))
	}
	t.keepOnly(newest...)
	return nil, true, nil
}

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

// Kept descriptors. A failed fsync fails the tenant for good (sync.go),
// and the kernel reports a writeback error to every descriptor opened
// before it, but to one opened after it only if nobody saw the error
// yet. The TSDB fsyncs a WAL segment itself when it moves on to the next
// one, and only logs a failure; a descriptor the Sync opened afterwards
// would then fsync with success. So the newest segment of each write log
// is fsynced through a descriptor kept open from one Sync to the next,
// opened before most of what the segment will hold was written.

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
