package tsdbstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/poll"
)

// errEIO stands for the error of an fsync(2) whose writeback failed.
var errEIO = writebackError(errors.New("input/output error (injected)"))

// failOnce makes the store's fsync of path fail once with err, and every
// other fsync real.
func failOnce(s *Store, path string, err error) {
	var once sync.Once
	s.durable.testFsync = func(p string) error {
		failed := false
		if p == path {
			once.Do(func() { failed = true })
		}
		if failed {
			return err
		}
		return syncFile(p)
	}
}

// wantWritebackFailure asserts that Sync and Ready fail with errWriteback,
// that the tenant's pushes are answered with a server error, and that the
// other tenant still takes writes.
func wantWritebackFailure(t *testing.T, s *Store, failed, other string, ts int64) {
	t.Helper()
	for i := range 3 {
		if _, err := s.Sync(context.Background()); !errors.Is(err, errWriteback) {
			t.Fatalf("Sync #%d after the failed writeback: %v, want errWriteback", i+1, err)
		}
	}
	if err := s.Ready(); !errors.Is(err, errWriteback) {
		t.Errorf("Ready after the failed writeback: %v", err)
	}
	_, err := s.Push(context.Background(), failed, floatReq(ts, 2))
	serverError(t, err)
	if !errors.Is(err, errWriteback) {
		t.Errorf("push to the failed tenant: %v, want errWriteback", err)
	}
	mustPush(t, s, other, floatReq(ts, 2))
}

// TestAFailedFsyncFailsEverySyncUntilRestart: the kernel reports a failed
// writeback to one fsync only and drops the data, so once a tenant's WAL
// failed to fsync no later Sync may succeed before a restart, however well
// the later fsyncs go; after the restart the store works again.
func TestAFailedFsyncFailsEverySyncUntilRestart(t *testing.T) {
	separateOnly(t, "a failure of the shared WAL is every tenant's")
	dir := filepath.Join(t.TempDir(), "storage")
	s := newTestStore(t, func(c *Config) { c.Path, c.SyncMethod = dir, SyncFsync })
	mustPush(t, s, "a", floatReq(base, 1))
	mustPush(t, s, "b", floatReq(base, 1))
	if _, err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	mustPush(t, s, "a", floatReq(base+1, 1))
	failOnce(s, filepath.Join(dir, testDB("a"), "wal", "00000000"), errEIO)
	n, err := s.Sync(context.Background())
	if !errors.Is(err, errWriteback) {
		t.Fatalf("Sync with the failed fsync: %v", err)
	}
	if n != 0 {
		t.Errorf("%d tenants synced, want 0 (b had nothing new)", n)
	}
	wantWritebackFailure(t, s, "a", "b", base+2)

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := newTestStore(t, func(c *Config) { c.Path = dir })
	mustPush(t, s2, "a", floatReq(base+3, 3))
	if _, err := s2.Sync(context.Background()); err != nil {
		t.Fatalf("Sync after the restart: %v", err)
	}
	if err := s2.Ready(); err != nil {
		t.Fatalf("Ready after the restart: %v", err)
	}
}

// TestAnFsyncThatCannotOpenIsRetried: an fsync that failed before it
// reached the file (opening it) says nothing of the data: the next Sync
// tries again and may succeed.
func TestAnFsyncThatCannotOpenIsRetried(t *testing.T) {
	separateOnly(t, "it tells tenants apart by their TSDBs")
	s := newTestStore(t, func(c *Config) { c.SyncMethod = SyncFsync })
	mustPush(t, s, "a", floatReq(base, 1))
	failOnce(s, filepath.Join(s.cfg.Path, testDB("a"), "wal", "00000000"), errors.New("too many open files (injected)"))
	if _, err := s.Sync(context.Background()); err == nil || errors.Is(err, errWriteback) {
		t.Fatalf("Sync with the failed open: %v", err)
	}
	if _, err := s.Sync(context.Background()); err != nil {
		t.Fatalf("Sync after it: %v", err)
	}
}

// TestAFailedIdleCloseOfAnUnsyncedTenantFailsSync: closing an idle tenant
// fsyncs its WAL and drops its head; when that fails before a Sync covered
// its commits, they may exist nowhere, and the Syncs after it must fail.
// When its commits were synced, a failed close is only logged.
func TestAFailedIdleCloseOfAnUnsyncedTenantFailsSync(t *testing.T) {
	separateOnly(t, "it tells tenants apart by their TSDBs")
	for _, synced := range []bool{false, true} {
		t.Run(fmt.Sprintf("synced=%v", synced), func(t *testing.T) {
			s := newTestStore(t, func(c *Config) {
				c.SyncMethod, c.IdleTimeout = SyncFsync, 20*time.Millisecond
			})
			mustPush(t, s, "a", floatReq(base, 1))
			if synced {
				if _, err := s.Sync(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			failOnce(s, filepath.Join(s.cfg.Path, testDB("a"), "wal"), errEIO)
			poll.Until(t, 10*time.Second, 5*time.Millisecond, "the idle tenant is closed", func() bool {
				s.tenants.mu.Lock()
				defer s.tenants.mu.Unlock()
				return s.tenants.byID[s.cfg.dbID("a")] == nil
			})
			if synced {
				if _, err := s.Sync(context.Background()); err != nil {
					t.Fatalf("Sync after a failed close of a synced tenant: %v", err)
				}
				return
			}
			wantWritebackFailure(t, s, "a", "b", base+1)
		})
	}
}

// TestAFailedFsyncIsNeverRecoveredFromTheHead: a tenant that failed to
// write back is not taken for lost storage: no recovery reopens it (that
// would stack a second TSDB on the files the first still writes), and
// closing the store closes it once.
func TestAFailedFsyncIsNeverRecoveredFromTheHead(t *testing.T) {
	separateOnly(t, "it tells tenants apart by their TSDBs")
	s := newTestStore(t, func(c *Config) { c.SyncMethod = SyncFsync })
	mustPush(t, s, "a", floatReq(base, 1))
	failOnce(s, filepath.Join(s.cfg.Path, testDB("a"), "wal", "00000000"), errEIO)
	if _, err := s.Sync(context.Background()); !errors.Is(err, errWriteback) {
		t.Fatal(err)
	}
	_, err := s.Push(context.Background(), "a", floatReq(base+1, 1))
	serverError(t, err)
	s.tenants.mu.Lock()
	broken := s.tenants.byID[s.cfg.dbID("a")].broken.Load()
	s.tenants.mu.Unlock()
	if broken {
		t.Error("the tenant was marked for recovery")
	}
	if got := floatsOf(queryAll(t, s, "a")[`{__name__="x"}`]); !slices.Equal(got, []float64{float64(base), 1}) {
		t.Errorf("the failed tenant's head: %v", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSyncFileReportsAFailedFsyncAsWriteback: the real fsync's error is an
// errWriteback (fsync of /dev/null fails with EINVAL on Linux), while a file
// that cannot be opened is not.
func TestSyncFileReportsAFailedFsyncAsWriteback(t *testing.T) {
	err := syncFile("/dev/null")
	if err == nil {
		t.Skip("fsync of /dev/null succeeds on this system")
	}
	if !errors.Is(err, errWriteback) {
		t.Errorf("fsync of /dev/null: %v, want errWriteback", err)
	}
	if err := syncFile(filepath.Join(t.TempDir(), "missing")); err == nil || errors.Is(err, errWriteback) {
		t.Errorf("fsync of a missing file: %v", err)
	}
}

// TestTheNewestSegmentIsFsyncedThroughAKeptDescriptor: the descriptor of a
// tenant's newest WAL segment stays open from one Sync to the next, so it
// sees a writeback error whoever saw it first; it still finds the segment
// removed, and it is closed with the tenant.
func TestTheNewestSegmentIsFsyncedThroughAKeptDescriptor(t *testing.T) {
	separateOnly(t, "it tells tenants apart by their TSDBs")
	s := newTestStore(t, func(c *Config) { c.SyncMethod, c.IdleTimeout = SyncFsync, time.Hour })
	mustPush(t, s, "a", floatReq(base, 1))
	if _, err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.tenants.mu.Lock()
	td := s.tenants.byID[s.cfg.dbID("a")]
	s.tenants.mu.Unlock()
	segment := filepath.Join(s.cfg.Path, testDB("a"), "wal", "00000000")
	kept := func() map[string]keptFile {
		td.syncMu.Lock()
		defer td.syncMu.Unlock()
		return maps.Clone(td.kept)
	}
	first := kept()
	if len(first) != 1 || first[segment].f == nil {
		t.Fatalf("kept after a Sync: %v, want only %s", slices.Collect(maps.Keys(first)), segment)
	}
	mustPush(t, s, "a", floatReq(base+1, 1))
	if _, err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if again := kept(); again[segment].f != first[segment].f {
		t.Error("the second Sync opened the segment again")
	}

	// A kept descriptor fsyncs an unlinked file with success: the path
	// must still be checked.
	if err := os.Remove(segment); err != nil {
		t.Fatal(err)
	}
	mustPush(t, s, "a", floatReq(base+2, 1))
	if _, err := s.Sync(context.Background()); !errors.Is(err, errStorageLost) {
		t.Fatalf("Sync with the newest segment removed: %v, want errStorageLost", err)
	}
	syncUntilOK(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if left := kept(); len(left) != 0 {
		t.Errorf("descriptors left open after Close: %v", slices.Collect(maps.Keys(left)))
	}
}
