package tsdbstore

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fsyncedTenants records the tenants whose files a store fsyncs; the store
// must use -storage.sync-method=fsync.
type fsyncedTenants struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (f *fsyncedTenants) install(s *Store) {
	s.syncs.fsync = func(path string) error {
		// The store's own files at the root are no tenant's.
		rel, err := filepath.Rel(s.cfg.Path, path)
		if err == nil && strings.ContainsRune(rel, filepath.Separator) {
			f.mu.Lock()
			f.seen[strings.Split(rel, string(filepath.Separator))[0]] = true
			f.mu.Unlock()
		}
		return syncFile(path)
	}
}

// take returns the tenants fsynced since the last take, sorted.
func (f *fsyncedTenants) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for t := range f.seen {
		out = append(out, t)
	}
	clear(f.seen)
	slices.Sort(out)
	return out
}

func TestSyncTenantsSyncsOnlyTheNamedTenants(t *testing.T) {
	s := newTestStore(t, func(c *Config) { c.SyncMethod = SyncFsync })
	f := fsyncedTenants{seen: map[string]bool{}}
	f.install(s)
	ctx := context.Background()
	for _, tenant := range []string{"a", "b", "c"} {
		mustPush(t, s, tenant, floatReq(base, 1))
	}

	n, err := s.SyncTenants(ctx, []string{"a", "c", "never-wrote"})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.take(); n != 2 || !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("SyncTenants(a, c, never-wrote) synced %d tenants, fsyncing the files of %v; want 2, of [a c]", n, got)
	}
	// b is still to sync, and an empty list asks for every tenant.
	n, err = s.SyncTenants(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.take(); n != 1 || !slices.Equal(got, []string{"b"}) {
		t.Fatalf("then SyncTenants() synced %d tenants, fsyncing the files of %v; want 1, of [b]", n, got)
	}
}

// TestACallerNamingItsTenantsDoesNotWaitForARunningRound: with fsyncs, a
// caller that names its tenants is served by a round of its own, started
// at once, while a round for every tenant is still under way.
func TestACallerNamingItsTenantsDoesNotWaitForARunningRound(t *testing.T) {
	s := newTestStore(t, func(c *Config) { c.SyncConcurrency, c.SyncMethod = 1, SyncFsync })
	var h fsyncHook
	h.install(s)
	release := sync.OnceFunc(h.let)
	defer release() // before the store's close, which waits for the round
	ctx := context.Background()
	mustPush(t, s, "x", floatReq(base, 1))
	first := make(chan error, 1)
	go func() {
		_, err := s.Sync(ctx)
		first <- err
	}()
	<-h.held // the round for every tenant is under way, and held
	mustPush(t, s, "a", floatReq(base, 1))
	mustPush(t, s, "b", floatReq(base, 1))

	own := make(chan error, 1)
	go func() {
		n, err := s.SyncTenants(ctx, []string{"a"})
		if err == nil && n != 1 {
			err = fmt.Errorf("%d tenants synced, want 1 (a)", n)
		}
		own <- err
	}()
	select {
	case err := <-own:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SyncTenants(a) still waits for the running round after 10s")
	}
	release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// TestARoundCoversWhatItsCallersAskedFor: a round shared by callers (with
// syncfs, or of callers naming no tenant) covers the union of the tenants
// they named, and every tenant once one of them named none.
func TestARoundCoversWhatItsCallersAskedFor(t *testing.T) {
	var r syncRound
	r.ask([]string{"a"})
	r.ask([]string{"b", "a"})
	if !r.covers("a") || !r.covers("b") || r.covers("c") {
		t.Fatalf("a round asked for a, then b and a covers a %v, b %v, c %v; want true, true, false", r.covers("a"), r.covers("b"), r.covers("c"))
	}
	r.ask(nil)
	r.ask([]string{"d"})
	if !r.covers("c") || !r.covers("e") {
		t.Fatal("a round one of whose callers named no tenant does not cover every tenant")
	}
}
