package tsdbstore

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// -storage.sync-method=syncfs: a round makes its tenants durable with one
// syncfs(2) on the storage root's filesystem instead of an fsync per
// written segment and directory. syncfs writes out every dirty page and
// inode of the filesystem and commits its journal, so it covers the
// segments' data and new directory entries at once, at the cost of one
// journal commit where a thousand fsyncs queue for several.
//
// What a round still does per tenant: the identity check (wal.go),
// and a stat of every file and directory the fsync method would fsync, so
// that a vanished WAL or newest segment is found the same way. Nothing is
// to be flushed in the process first: the TSDB writes each record to its
// segment file with write(2) before its Commit returns (the WAL buffers
// at most one page, and flushes it at the end of every Log call), so what
// was committed is in the page cache, which syncfs writes out.
//
// What syncfs promises: since Linux 5.8 it reports a writeback error of
// any file on the filesystem that happened since the descriptor it is
// called on was opened or last reported one. Before 5.8 it returned 0 even
// when writeback failed, which would let the consumer commit offsets of
// data that is not on disk, so Validate refuses those kernels. The error
// does not say whose file failed: it may be another process's on the same
// filesystem. So a failed syncfs fails the round for every caller, records
// nothing as durable, and the tenants it covered are fsynced file by file
// in their next round: a fresh descriptor's fsync reports its own file's
// writeback error that syncfs saw (the kernel keeps it per file for
// fsync), which fails the tenant until the pusher restarts (sync.go);
// a later syncfs would only see errors newer than the failed one.
//
// A tenant whose directories are not on the root's filesystem (a mount
// below -storage.path) is fsynced file by file: syncfs covers one
// filesystem.

// syncfsCheck is syncfsSupported; a test replaces it to see the refusal on
// a kernel that supports syncfs.
var syncfsCheck = syncfsSupported

// pendingTenant is a tenant whose state a round records once its syncfs
// succeeded; the round holds a reference on it until then.
type pendingTenant struct {
	t  *tenantDB
	st *walState
}

// checkSyncfsKernel fails for a Linux release (uname -r) whose syncfs(2)
// does not report writeback errors: before 5.8.
func checkSyncfsKernel(release string) error {
	major, minor, ok := kernelVersion(release)
	if !ok {
		return fmt.Errorf("cannot read the kernel version from %q, and syncfs(2) reports writeback errors only since Linux 5.8", release)
	}
	if major < 5 || major == 5 && minor < 8 {
		return fmt.Errorf("kernel %s returns success from syncfs(2) even when writing data back failed (fixed in 5.8), so offsets of data not on disk could be committed", release)
	}
	return nil
}

// kernelVersion parses the major and minor version from a release such as
// "6.1.0-18-amd64".
func kernelVersion(release string) (major, minor int, ok bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	end := strings.IndexFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
	if end >= 0 {
		parts[1] = parts[1][:end]
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return major, minor, true
}

// openSyncfsRoot opens the storage root for syncfs(2), and returns it
// with the device of its filesystem. The descriptor is kept until Close:
// syncfs reports the writeback errors since it was opened, so a
// descriptor per round would miss those between rounds.
func openSyncfsRoot(root string) (*os.File, uint64, error) {
	f, err := os.Open(root)
	if err != nil {
		return nil, 0, fmt.Errorf("open storage root for syncfs: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, errors.Join(fmt.Errorf("stat storage root: %w", err), f.Close())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, 0, errors.Join(fmt.Errorf("stat storage root %s: no device on this platform", root), f.Close())
	}
	return f, uint64(st.Dev), nil //nolint:unconvert // Dev is not uint64 on every OS
}

// onSyncfsFilesystem reports whether the syncfs of the storage root covers
// the tenant: its directory, its WAL and the root it was opened in are on
// the root's filesystem.
func (d *durability) onSyncfsFilesystem(t *tenantDB) bool {
	dev := d.syncfsDev
	return t.rootID.dev == dev && t.dirID.dev == dev && t.walID.dev == dev
}

// checkPath is the per-file step of a tenant covered by syncfs: the file
// must exist, as for an fsync, but the syncfs makes it durable.
func (d *durability) checkPath(path string) error {
	_, err := os.Lstat(path)
	return err
}

// syncfsPending makes the pending tenants durable with one syncfs and
// records their state; on failure it records nothing and has their next
// sync fsync them file by file. It releases the tenants.
func (d *durability) syncfsPending(pending []pendingTenant) error {
	err := d.syncfs()
	for _, p := range pending {
		p.t.syncMu.Lock()
		if err == nil {
			p.t.record(p.st)
		} else {
			p.t.fsyncNext = true
		}
		p.t.syncMu.Unlock()
		d.tenants.release(p.t)
	}
	if err != nil {
		return fmt.Errorf("syncfs of the filesystem of %s (%d tenants with data to sync; their next Sync fsyncs them file by file): %w",
			d.cfg.Path, len(pending), err)
	}
	return nil
}

// syncfs calls syncfs(2) on the storage root, through the test hook if set.
func (d *durability) syncfs() error {
	if f := d.testSyncfs; f != nil {
		return f()
	}
	return syncfsFile(d.syncfsRoot)
}
