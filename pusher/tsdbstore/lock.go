package tsdbstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/prometheus/prometheus/tsdb/fileutil"
)

// lockFileName is the file in the storage root that a running store holds
// an exclusive lock on. Each tenant's TSDB locks its own directory too, but
// only once opened: two pushers on one root would both start and then fight
// over every tenant, each failing the other's writes.
const lockFileName = "ferry-pusher.lock"

// rootLock is the store's exclusive lock on its storage root, taken with
// the TSDB's own fileutil.Flock (flock(2) on Unix, LockFileEx on Windows).
type rootLock struct {
	path string // the lock file

	mu   sync.Mutex
	held fileutil.Releaser
	// file is the lock file as it was when locked, to tell whether the
	// path still names it after a recovery recreated the root.
	file os.FileInfo
}

// lockRoot takes the exclusive lock on the storage root, failing at once
// when another process holds it.
func lockRoot(root string) (*rootLock, error) {
	l := &rootLock{path: filepath.Join(root, lockFileName)}
	if err := l.take(root); err != nil {
		return nil, err
	}
	return l, nil
}

// take locks l.path; l.mu is held or l not yet shared.
func (l *rootLock) take(root string) error {
	held, _, err := fileutil.Flock(l.path)
	switch {
	case errors.Is(err, syscall.EWOULDBLOCK):
		return fmt.Errorf("storage path %s is in use by another ferry-pusher (it holds the lock on %s): every pusher needs its own -storage.path", root, l.path)
	case err != nil:
		return fmt.Errorf("lock %s: %w", l.path, err)
	}
	fi, err := os.Stat(l.path)
	if err != nil {
		return errors.Join(fmt.Errorf("stat lock file %s: %w", l.path, err), held.Release())
	}
	l.held, l.file = held, fi
	return nil
}

// relock takes the lock again after the storage root was recreated by a
// recovery: the old lock file went with the old directory. It does
// nothing while the path still names the locked file.
func (l *rootLock) relock(root string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held != nil {
		if fi, err := os.Stat(l.path); err == nil && os.SameFile(fi, l.file) {
			return nil
		}
		// The file is gone with its directory: unlocking it cannot fail
		// anyone, and its error says nothing.
		_ = l.held.Release()
		l.held = nil
	}
	return l.take(root)
}

// release releases the lock; it is idempotent.
func (l *rootLock) release() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held == nil {
		return nil
	}
	err := l.held.Release()
	l.held = nil
	return err
}

// Ready reports whether the store can write: its storage root exists and a
// file can be created in it. It fails while the disk is read-only or the
// root is gone, so /ready takes the pusher out of rotation while every
// write would fail; and for good once a tenant's storage failed to write
// back (sync.go), since every Sync fails until the restart.
func (s *Store) Ready() error {
	if err := s.replaying(); err != nil {
		return err
	}
	if err := s.durable.writebackFailures(); err != nil {
		return err
	}
	f, err := os.CreateTemp(s.cfg.Path, ".ready-probe-*")
	if err != nil {
		return fmt.Errorf("tsdb storage %s is not writable: %w", s.cfg.Path, err)
	}
	name := f.Name()
	err = f.Close()
	return errors.Join(err, os.Remove(name))
}
