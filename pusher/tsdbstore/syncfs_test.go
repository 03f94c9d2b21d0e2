package tsdbstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// syncMethods are the -storage.sync-method values this machine can run:
// the durability tests run with each.
func syncMethods(t *testing.T) []string {
	t.Helper()
	if err := syncfsSupported(); err != nil {
		t.Logf("syncfs not tested: %v", err)
		return []string{SyncFsync}
	}
	return []string{SyncFsync, SyncSyncfs}
}

// newSyncfsStore is a test store with -storage.sync-method=syncfs; the
// test is skipped where syncfs is refused.
func newSyncfsStore(t *testing.T, modify func(*Config)) *Store {
	t.Helper()
	if err := syncfsSupported(); err != nil {
		t.Skipf("syncfs: %v", err)
	}
	return newTestStore(t, func(c *Config) {
		c.SyncMethod = SyncSyncfs
		if modify != nil {
			modify(c)
		}
	})
}

// syncCalls counts a store's fsyncs and syncfs calls, does them for real,
// and fails the syncfs calls while failSyncfs is set.
type syncCalls struct {
	fsyncs, syncfs atomic.Int64
	failSyncfs     atomic.Bool

	mu      sync.Mutex
	fsynced []string
	// atSyncfs runs before each syncfs.
	atSyncfs func()
}

// errSyncfsInjected is the syncfs failure the tests inject.
var errSyncfsInjected = errors.New("injected syncfs failure")

func (c *syncCalls) install(s *Store) {
	s.durable.testFsync = func(path string) error {
		c.fsyncs.Add(1)
		c.mu.Lock()
		c.fsynced = append(c.fsynced, path)
		c.mu.Unlock()
		return syncFile(path)
	}
	s.durable.testSyncfs = func() error {
		c.syncfs.Add(1)
		if c.atSyncfs != nil {
			c.atSyncfs()
		}
		if c.failSyncfs.Load() {
			return errSyncfsInjected
		}
		return syncfsFile(s.durable.syncfsRoot)
	}
}

// reset zeroes the counts and returns the paths fsynced since the last one.
func (c *syncCalls) reset() []string {
	c.fsyncs.Store(0)
	c.syncfs.Store(0)
	c.mu.Lock()
	defer c.mu.Unlock()
	paths := c.fsynced
	c.fsynced = nil
	return paths
}

// durableState reports whether the tenant's last sync covers all its
// commits.
func durableState(t *testing.T, s *Store, tenant string) bool {
	t.Helper()
	s.tenants.mu.Lock()
	td := s.tenants.byID[s.cfg.dbID(tenant)]
	s.tenants.mu.Unlock()
	if td == nil {
		t.Fatalf("tenant %s is not open", tenant)
	}
	td.syncMu.Lock()
	defer td.syncMu.Unlock()
	return td.syncedCommits == td.commits.Load() && td.dirsSynced
}

// TestSyncfsRoundIsOneSyncfsAndNoFsync: with syncfs a round of many
// tenants makes one syncfs(2) and no fsync, each tenant's records are in
// its segment file when the syncfs runs, every tenant counts as synced,
// and a round with nothing new makes no syncfs at all.
func TestSyncfsRoundIsOneSyncfsAndNoFsync(t *testing.T) {
	separateOnly(t, "it counts the tenants a Sync covers, one TSDB each")
	s := newSyncfsStore(t, func(c *Config) { c.SyncConcurrency = 4 })
	var calls syncCalls
	calls.install(s)
	const tenants = 20
	name := func(i int) string { return fmt.Sprintf("t%02d", i) }
	var unwritten []string
	calls.atSyncfs = func() {
		// What syncfs writes out must be in the files by now: the TSDB
		// writes a record to its segment before Commit returns.
		for i := range tenants {
			fi, err := os.Stat(filepath.Join(s.cfg.Path, name(i), "wal", "00000000"))
			if err != nil || fi.Size() == 0 {
				unwritten = append(unwritten, name(i))
			}
		}
	}
	for i := range tenants {
		mustPush(t, s, name(i), floatReq(base, float64(i)))
	}
	ctx := context.Background()
	if n, err := s.Sync(ctx); err != nil || n != tenants {
		t.Fatalf("sync: %d tenants, %v; want %d", n, err, tenants)
	}
	if f, sf := calls.fsyncs.Load(), calls.syncfs.Load(); f != 0 || sf != 1 {
		t.Fatalf("a round of %d tenants made %d fsyncs and %d syncfs calls, want 0 and 1", tenants, f, sf)
	}
	if len(unwritten) > 0 {
		t.Fatalf("segments still empty when syncfs ran: %v", unwritten)
	}
	for i := range tenants {
		if !durableState(t, s, name(i)) {
			t.Errorf("tenant %s not recorded as synced", name(i))
		}
	}
	calls.reset()
	if n, err := s.Sync(ctx); err != nil || n != 0 {
		t.Fatalf("sync without commits: %d tenants, %v; want 0", n, err)
	}
	if sf := calls.syncfs.Load(); sf != 0 {
		t.Fatalf("a round with nothing committed made %d syncfs calls, want 0", sf)
	}
	mustPush(t, s, name(3), floatReq(base+1000, 1))
	if n, err := s.Sync(ctx); err != nil || n != 1 {
		t.Fatalf("sync of one tenant: %d tenants, %v; want 1", n, err)
	}
	if f, sf := calls.fsyncs.Load(), calls.syncfs.Load(); f != 0 || sf != 1 {
		t.Fatalf("a round of one tenant made %d fsyncs and %d syncfs calls, want 0 and 1", f, sf)
	}
}

// TestSyncfsFailureFailsTheRoundAndFsyncsNext: a failed syncfs fails every
// caller of its round and records no tenant as durable; the tenants it
// covered are fsynced file by file in their next round (whose fsyncs
// report their own files' writeback errors), the others go on with syncfs.
func TestSyncfsFailureFailsTheRoundAndFsyncsNext(t *testing.T) {
	separateOnly(t, "it tells tenants apart by their TSDBs")
	s := newSyncfsStore(t, nil)
	var calls syncCalls
	calls.install(s)
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	calls.atSyncfs = func() {
		once.Do(func() {
			close(held)
			<-release
		})
	}
	calls.failSyncfs.Store(true)
	ctx := context.Background()
	mustPush(t, s, "a", floatReq(base, 1))
	mustPush(t, s, "b", floatReq(base, 2))

	first := make(chan error, 1)
	go func() {
		_, err := s.Sync(ctx)
		first <- err
	}()
	<-held // The first round covers a and b and is in its syncfs.
	mustPush(t, s, "c", floatReq(base, 3))
	const callers = 4
	results := make(chan error, callers)
	for range callers {
		go func() {
			_, err := s.Sync(ctx)
			results <- err
		}()
	}
	waitCallers(t, s, 1+callers)
	close(release)
	if err := <-first; !errors.Is(err, errSyncfsInjected) {
		t.Fatalf("the caller of the failed round: %v, want the syncfs failure", err)
	}
	// The second round fsynced a and b file by file (they are durable
	// now), and c was in its failed syncfs.
	for range callers {
		if err := <-results; !errors.Is(err, errSyncfsInjected) {
			t.Fatalf("a caller of the second round: %v, want the syncfs failure", err)
		}
	}
	fsynced := calls.reset()
	for _, tenant := range []string{"a", "b"} {
		seg := filepath.Join(s.cfg.Path, s.cfg.dbID(tenant), "wal", "00000000")
		if !slices.Contains(fsynced, seg) {
			t.Errorf("after the failed syncfs, tenant %s's segment was not fsynced; fsynced %v", tenant, fsynced)
		}
		if !durableState(t, s, tenant) {
			t.Errorf("tenant %s not recorded as synced by its fsyncs", tenant)
		}
	}
	if slices.ContainsFunc(fsynced, func(p string) bool { return strings.HasPrefix(p, filepath.Join(s.cfg.Path, "c")) }) {
		t.Errorf("tenant c was fsynced before a syncfs failed for it: %v", fsynced)
	}
	if durableState(t, s, "c") {
		t.Fatal("tenant c recorded as synced although the syncfs of its round failed")
	}

	calls.failSyncfs.Store(false)
	if n, err := s.Sync(ctx); err != nil || n != 1 {
		t.Fatalf("sync after the failures: %d tenants, %v; want 1 (c)", n, err)
	}
	if fsynced := calls.reset(); !slices.Contains(fsynced, filepath.Join(s.cfg.Path, "c", "wal", "00000000")) {
		t.Errorf("tenant c was not fsynced file by file after its failed syncfs: %v", fsynced)
	}
	if !durableState(t, s, "c") {
		t.Fatal("tenant c not recorded as synced")
	}
	// Back to syncfs for everyone.
	mustPush(t, s, "a", floatReq(base+1000, 1))
	mustPush(t, s, "c", floatReq(base+1000, 3))
	if n, err := s.Sync(ctx); err != nil || n != 2 {
		t.Fatalf("sync: %d tenants, %v; want 2", n, err)
	}
	if f, sf := calls.fsyncs.Load(), calls.syncfs.Load(); f != 0 || sf != 1 {
		t.Fatalf("the round after a recovered failure made %d fsyncs and %d syncfs calls, want 0 and 1", f, sf)
	}
}

// TestSyncfsFsyncsATenantOnAnotherFilesystem: syncfs covers the storage
// root's filesystem only, so a tenant whose directories are elsewhere (a
// mount below the root) is fsynced. Simulated by giving the root another
// device number: then no tenant is on the root's filesystem.
func TestSyncfsFsyncsATenantOnAnotherFilesystem(t *testing.T) {
	separateOnly(t, "tenants have no directories of their own")
	s := newSyncfsStore(t, nil)
	var calls syncCalls
	calls.install(s)
	mustPush(t, s, "a", floatReq(base, 1))
	s.durable.syncfsDev++
	if n, err := s.Sync(context.Background()); err != nil || n != 1 {
		t.Fatalf("sync: %d tenants, %v; want 1", n, err)
	}
	fsynced := calls.reset()
	if !slices.Contains(fsynced, filepath.Join(s.cfg.Path, testDB("a"), "wal", "00000000")) {
		t.Errorf("the tenant off the root's filesystem was not fsynced: %v", fsynced)
	}
	if sf := calls.syncfs.Load(); sf != 0 {
		t.Errorf("%d syncfs calls for no tenant on the root's filesystem, want 0", sf)
	}
}

func TestCheckSyncfsKernel(t *testing.T) {
	for release, ok := range map[string]bool{
		"5.8.0":                     true,
		"5.10.0-28-amd64":           true,
		"6.18.44-fc-v1045":          true,
		"10.0.1":                    true,
		"5.4.0-150-generic":         false,
		"5.7.19":                    false,
		"4.19.0-26-amd64":           false,
		"3.10.0-1160.el7.x86_64":    false,
		"5":                         false,
		"garbage":                   false,
		"5.15.0-1057-azure+custom.": true,
	} {
		err := checkSyncfsKernel(release)
		if (err == nil) != ok {
			t.Errorf("release %q: %v, want accepted=%v", release, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), release) {
			t.Errorf("release %q: the error does not name it: %v", release, err)
		}
	}
}
