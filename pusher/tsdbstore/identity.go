package tsdbstore

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// Durability is checked, not assumed: a tenant's TSDB writes through file
// descriptors that keep working after its directory was removed or
// replaced, so a vanished directory shows in no write error. The store
// records the identity (device and inode) of the storage root and of each
// open tenant's directory, and checks them before every append and Sync.

// errStorageLost fails a push or Sync of a tenant whose directory, WAL or
// storage root vanished or was replaced under the open TSDB: what it
// acknowledged cannot be proven durable. It is a server error, so nothing
// is committed past it, and it starts the tenant's recovery (recover.go).
var errStorageLost = errors.New("tenant storage vanished or was replaced under the open TSDB")

// errTenantNotDir fails a tenant whose path holds something that is not a
// directory: an operator's mistake that no retry fixes by itself.
var errTenantNotDir = errors.New("tenant path is not a directory")

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

// tenantPaths checks tenants' paths before their TSDBs open there.
type tenantPaths struct {
	logger *slog.Logger
	// reported are the tenant paths already reported as not being
	// directories, so each is logged once.
	reported sync.Map
}

// check fails when the tenant's path exists and is not a directory,
// reporting it once per path at error level: the TSDB cannot be opened
// there until an operator moves the file away.
func (p *tenantPaths) check(id, dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil || fi.IsDir() {
		if errors.Is(err, fs.ErrNotExist) {
			p.reported.Delete(dir)
		}
		return nil
	}
	err = fmt.Errorf("%w: %s (mode %s) is not a directory; move it away so the tenant %q can be stored",
		errTenantNotDir, dir, fi.Mode(), id)
	if _, reported := p.reported.LoadOrStore(dir, struct{}{}); !reported {
		p.logger.Error("operator error: a file is where a tenant directory belongs; the tenant's writes fail until it is moved",
			"path", dir, "tenant", id, "mode", fi.Mode().String())
	}
	return err
}

// usable fails for a tenant whose storage failed to write back
// (writeback.go) or is lost: marked broken, or found so now.
func (d *durability) usable(t *tenantDB) error {
	d.failedMu.Lock()
	failed := d.writebackFailed[t.id]
	d.failedMu.Unlock()
	broken := d.tenants.isBroken(t)
	if failed != nil {
		return fmt.Errorf("tenant %q: %w", t.id, failed)
	}
	if broken {
		return fmt.Errorf("%w: tenant %q is being reopened", errStorageLost, t.id)
	}
	return d.checkIdentity(t)
}
