package tsdbstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockFileName is the file in the storage root that a running store holds
// an exclusive lock on. Each tenant's TSDB locks its own directory too, but
// only once opened: two pushers on one root would both start and then fight
// over every tenant, each failing the other's writes.
const lockFileName = "ferry-pusher.lock"

// lockRoot takes the exclusive lock on the storage root, failing at once
// when another process holds it.
func lockRoot(root string) (*os.File, error) {
	path := filepath.Join(root, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file %s: %w", path, err)
	}
	fd := int(f.Fd())
	if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("storage path %s is in use by another ferry-pusher (it holds the lock on %s): every pusher needs its own -storage.path", root, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}

// relockRoot takes the lock again after the storage root was recreated by
// a recovery: the old lock file went with the old directory. Failing is
// logged, not fatal: the tenants are served either way.
func (s *Store) relockRoot() {
	s.lockMu.Lock()
	defer s.lockMu.Unlock()
	if s.lock != nil {
		if fi, err := os.Stat(filepath.Join(s.cfg.Path, lockFileName)); err == nil {
			if held, herr := s.lock.Stat(); herr == nil && os.SameFile(fi, held) {
				return
			}
		}
		_ = s.lock.Close()
		s.lock = nil
	}
	f, err := lockRoot(s.cfg.Path)
	if err != nil {
		s.logger.Error("cannot lock the recreated storage root", "path", s.cfg.Path, "err", err)
		return
	}
	s.lock = f
}

// unlockRoot releases the storage root's lock.
func (s *Store) unlockRoot() error {
	s.lockMu.Lock()
	defer s.lockMu.Unlock()
	if s.lock == nil {
		return nil
	}
	err := s.lock.Close()
	s.lock = nil
	return err
}

// Ready reports whether the store can write: its storage root exists and a
// file can be created in it. It fails while the disk is read-only or the
// root is gone, so /ready takes the pusher out of rotation while every
// write would fail; and for good once a tenant's storage failed to write
// back (writeback.go), since every Sync fails until the restart.
func (s *Store) Ready() error {
	if err := s.replaying(); err != nil {
		return err
	}
	if err := s.writebackFailures(); err != nil {
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
