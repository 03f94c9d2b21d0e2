package tsdbstore

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// fsyncedTenants records the tenants whose files a store fsyncs; the store
// must use -storage.sync-method=fsync.
type fsyncedTenants struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (f *fsyncedTenants) install(s *Store) {
	s.durable.testFsync = func(path string) error {
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
	separateOnly(t, "every Sync syncs the one shared WAL")
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

// TestARoundServesWhatEachOfItsCallersNamed: callers that arrive while a
// round runs share the next one, which syncs the union of the tenants
// they named, and every tenant once one of them named none.
func TestARoundServesWhatEachOfItsCallersNamed(t *testing.T) {
	separateOnly(t, "every Sync syncs the one shared WAL")
	for _, tc := range []struct {
		name    string
		callers [][]string // nil: Sync
		want    []string   // tenants of the next round's fsyncs
	}{
		{"named tenants", [][]string{{"a"}, {"b"}}, []string{"a", "b"}},
		{"one caller names none", [][]string{{"a"}, nil}, []string{"a", "b", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, h, first := holdARound(t, "x", func(s *Store) error {
				_, err := s.SyncTenants(ctx, []string{"x"})
				return err
			})
			for _, tenant := range []string{"a", "b", "c"} {
				mustPush(t, s, tenant, floatReq(base, 1))
			}
			rounds := s.durable.rounds.started.Load()
			results := make(chan error, len(tc.callers))
			for _, names := range tc.callers {
				go func() {
					_, err := s.SyncTenants(ctx, names)
					results <- err
				}()
			}
			waitCallers(t, s, 1+len(tc.callers))
			h.let()
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			for range tc.callers {
				if err := <-results; err != nil {
					t.Fatal(err)
				}
			}
			var got []string // x is the first round's, which ends after let
			for _, tenant := range []string{"a", "b", "c"} {
				if h.fsyncedSegment(s, tenant) {
					got = append(got, tenant)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("the second round fsynced the WAL of %v, want %v", got, tc.want)
			}
			if n := s.durable.rounds.started.Load() - rounds; n != 1 {
				t.Errorf("%d rounds after the first served the callers, want 1", n)
			}
		})
	}
}
