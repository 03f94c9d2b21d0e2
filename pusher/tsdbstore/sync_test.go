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
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/poll"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// TestSyncCoversEveryTenantAndACancelledSyncReleasesThem syncs many
// tenants: every one must be counted, a cancelled Sync must release every
// tenant it did not sync (or Close would wait for them forever) and commit
// to nothing, and the next Sync must find them all still to do.
func TestSyncCoversEveryTenantAndACancelledSyncReleasesThem(t *testing.T) {
	separateOnly(t, "it counts the tenants a Sync covers, one TSDB each")
	for _, method := range syncMethods(t) {
		t.Run(method, func(t *testing.T) {
			s := newTestStore(t, func(c *Config) { c.SyncMethod = method })
			const tenants = 40
			push := func(ts int64) {
				for i := range tenants {
					mustPush(t, s, fmt.Sprintf("t%d", i), &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), float64(ts), 1)}})
				}
			}
			push(base)
			if n, err := s.Sync(context.Background()); err != nil || n != tenants {
				t.Fatalf("sync: %d tenants, %v; want %d", n, err, tenants)
			}
			if n, err := s.Sync(context.Background()); err != nil || n != 0 {
				t.Fatalf("second sync: %d tenants, %v; want 0, nothing new", n, err)
			}

			push(base + 1000)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if n, err := s.Sync(ctx); !errors.Is(err, context.Canceled) || n != 0 {
				t.Fatalf("cancelled sync: %d tenants, %v; want 0 and context.Canceled", n, err)
			}
			if n, err := s.Sync(context.Background()); err != nil || n != tenants {
				t.Fatalf("sync after a cancelled one: %d tenants, %v; want %d", n, err, tenants)
			}
			closed := make(chan error, 1)
			go func() { closed <- s.Close() }()
			select {
			case err := <-closed:
				if err != nil {
					t.Fatalf("close: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("close still waiting after 30s: a Sync kept a reference to a tenant")
			}
		})
	}
}

// fsyncHook records the paths a store fsyncs after release, fails those in
// fail, and holds the first fsync (after doing it) until release is closed,
// so a test can act while a round is under way.
type fsyncHook struct {
	held    chan struct{} // closed when the first fsync is held
	release chan struct{}
	once    sync.Once

	mu       sync.Mutex
	released bool
	after    []string // fsynced after release
	fail     map[string]error
}

// install makes h the fsync of s; before the first Sync. The store must
// use -storage.sync-method=fsync.
func (h *fsyncHook) install(s *Store) {
	h.held = make(chan struct{})
	h.release = make(chan struct{})
	s.durable.testFsync = func(path string) error {
		h.mu.Lock()
		err := h.fail[path]
		h.mu.Unlock()
		if err != nil {
			return err
		}
		err = syncFile(path)
		hold := false
		h.once.Do(func() { hold = true })
		if hold {
			close(h.held)
			<-h.release
		}
		h.mu.Lock()
		if h.released {
			h.after = append(h.after, path)
		}
		h.mu.Unlock()
		return err
	}
}

// let the held fsync go on; what is fsynced from now on is recorded.
func (h *fsyncHook) let() {
	h.mu.Lock()
	h.released = true
	h.mu.Unlock()
	close(h.release)
}

// fsyncedSegment reports whether a segment of the tenant's WAL was fsynced
// after release.
func (h *fsyncHook) fsyncedSegment(s *Store, tenant string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.after {
		if filepath.Dir(p) == filepath.Join(s.cfg.Path, s.cfg.dbID(tenant), "wal") {
			return true
		}
	}
	return false
}

// waitCallers waits until n Sync calls joined the running or the next round.
func waitCallers(t *testing.T, s *Store, n int) {
	t.Helper()
	poll.Until(t, 10*time.Second, time.Millisecond, fmt.Sprintf("%d callers wait for a round", n), func() bool {
		s.durable.rounds.mu.Lock()
		defer s.durable.rounds.mu.Unlock()
		got := 0
		for _, r := range []*syncRound{s.durable.rounds.current, s.durable.rounds.next} {
			if r != nil {
				got += r.callers
			}
		}
		return got == n
	})
}

// holdARound returns a store (fsyncs, one at a time) whose first round,
// started by sync after a commit of tenant, is under way and held in its
// first fsync until the hook lets it go; first gets what sync returned.
func holdARound(t *testing.T, tenant string, sync func(*Store) error) (s *Store, h *fsyncHook, first <-chan error) {
	t.Helper()
	s = newTestStore(t, func(c *Config) { c.SyncConcurrency, c.SyncMethod = 1, SyncFsync })
	h = &fsyncHook{}
	h.install(s)
	mustPush(t, s, tenant, floatReq(base, 1))
	done := make(chan error, 1)
	go func() { done <- sync(s) }()
	<-h.held
	return s, h, done
}

// TestSyncIsServedByARoundThatStartedAfterIt: a round under way may have
// passed a tenant before its last commit, so a caller arriving meanwhile
// must wait for the next round; the concurrent callers share that one, and
// one of them giving up cancels it for none of the others.
func TestSyncIsServedByARoundThatStartedAfterIt(t *testing.T) {
	s, h, first := holdARound(t, "a", func(s *Store) error {
		_, err := s.Sync(context.Background())
		return err
	})
	// The round fsynced a's segment, and is not over.
	ctx := context.Background()
	mustPush(t, s, "a", floatReq(base+1000, 2))

	rounds := s.durable.rounds.started.Load()
	const callers = 8
	results := make(chan error, callers)
	for range callers {
		go func() {
			n, err := s.Sync(ctx)
			if err == nil && n != 1 {
				err = fmt.Errorf("%d tenants synced, want 1", n)
			}
			results <- err
		}()
	}
	quitter, quit := context.WithCancel(ctx)
	quitted := make(chan error, 1)
	go func() {
		_, err := s.Sync(quitter)
		quitted <- err
	}()
	waitCallers(t, s, 1+callers+1)
	quit()
	select {
	case err := <-quitted:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the caller that gave up: %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a caller whose context ended still waits for its round after 30s")
	}

	h.let()
	if err := <-first; err != nil {
		t.Fatalf("first sync: %v", err)
	}
	for range callers {
		if err := <-results; err != nil {
			t.Fatalf("a caller of the second round: %v", err)
		}
	}
	if !h.fsyncedSegment(s, "a") {
		t.Fatal("the callers returned without a round that fsynced the commit made before their call")
	}
	if got := s.durable.rounds.started.Load() - rounds; got != 1 {
		t.Fatalf("%d rounds served %d concurrent callers, want 1", got, callers)
	}
}

// errInjected is the fsync error TestParallelSyncKeepsErrorsPerTenant
// injects.
var errInjected = errors.New("injected fsync failure")

// TestParallelSyncKeepsErrorsPerTenant: tenants are synced in parallel, and
// each tenant's failure is its own: the Sync fails naming each failed
// tenant, a lost tenant is recovered, and the others are synced.
func TestParallelSyncKeepsErrorsPerTenant(t *testing.T) {
	separateOnly(t, "a failure of the shared WAL is every tenant's")
	s := newTestStore(t, func(c *Config) { c.SyncConcurrency, c.SyncMethod = 4, SyncFsync })
	h := fsyncHook{fail: map[string]error{}}
	h.install(s)
	h.let()
	const tenants = 16
	name := func(i int) string { return fmt.Sprintf("t%02d", i) }
	for i := range tenants {
		mustPush(t, s, name(i), floatReq(base, 1))
	}
	failing := map[string]bool{name(2): true, name(9): true}
	for tenant := range failing {
		h.fail[filepath.Join(s.cfg.Path, s.cfg.dbID(tenant), "wal", "00000000")] = errInjected
	}
	lost := name(13)
	if err := os.RemoveAll(filepath.Join(s.cfg.Path, lost, "wal")); err != nil {
		t.Fatal(err)
	}
	n, err := s.Sync(context.Background())
	if !errors.Is(err, errInjected) || !errors.Is(err, errStorageLost) {
		t.Fatalf("sync: %v, want the injected failure and errStorageLost", err)
	}
	for tenant := range failing {
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", tenant)) {
			t.Errorf("the error does not name tenant %s: %v", tenant, err)
		}
	}
	if want := tenants - len(failing) - 1; n != want {
		t.Errorf("%d tenants synced, want %d", n, want)
	}
	for i := range tenants {
		s.tenants.mu.Lock()
		td := s.tenants.byID[s.cfg.dbID(name(i))]
		s.tenants.mu.Unlock()
		if td == nil || failing[td.id] || td.id == lost {
			continue
		}
		td.syncMu.Lock()
		synced := td.syncedCommits == td.commits.Load()
		td.syncMu.Unlock()
		if !synced {
			t.Errorf("tenant %s was not synced beside the failing ones", td.id)
		}
	}
	h.mu.Lock()
	clear(h.fail)
	h.mu.Unlock()
	syncUntilOK(t, s)
	if got := floatsOf(queryAll(t, s, lost)[`{__name__="x"}`]); !slices.Equal(got, []float64{float64(base), 1}) {
		t.Errorf("the lost tenant after its recovery: %v", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSyncFsyncsTheDirectoryOfANewSegment: the WAL directory is fsynced
// when it gained a segment since the last Sync, and only then.
func TestSyncFsyncsTheDirectoryOfANewSegment(t *testing.T) {
	separateOnly(t, "a tenant's first write creates no directory of its own")
	s := newTestStore(t, func(c *Config) { c.BlockDuration, c.SyncMethod = time.Second, SyncFsync })
	h := fsyncHook{}
	h.install(s)
	h.let()
	ctx := context.Background()
	walDir := filepath.Join(s.cfg.Path, testDB("a"), "wal")
	// fsynced runs a Sync and returns what it fsynced.
	fsynced := func() []string {
		t.Helper()
		h.mu.Lock()
		h.after = nil
		h.mu.Unlock()
		if _, err := s.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		return slices.Clone(h.after)
	}
	mustPush(t, s, "a", floatReq(base, 1))
	if got := fsynced(); !slices.Contains(got, walDir) || !slices.Contains(got, filepath.Join(walDir, "00000000")) {
		t.Fatalf("first sync fsynced %v, want the WAL directory and segment 0", got)
	}
	mustPush(t, s, "a", floatReq(base+1000, 2))
	if got := fsynced(); slices.Contains(got, walDir) || !slices.Contains(got, filepath.Join(walDir, "00000000")) {
		t.Fatalf("sync without a new segment fsynced %v, want segment 0 and not the directory", got)
	}

	// Compacting the head cuts a new WAL segment (and may remove old
	// ones), as a running TSDB does every block duration.
	mustPush(t, s, "a", floatReq(base+5000, 3))
	s.tenants.mu.Lock()
	db := s.tenants.byID[s.cfg.dbID("a")].db
	s.tenants.mu.Unlock()
	var segs []int
	// The first calls only start the delay of the delayed compaction
	// (openDB).
	poll.Until(t, 10*time.Second, 10*time.Millisecond, "the head compaction cuts a WAL segment", func() bool {
		if err := db.Compact(ctx); err != nil {
			t.Fatal(err)
		}
		var err error
		if segs, err = segmentIndexes(walDir); err != nil {
			t.Fatal(err)
		}
		return len(segs) > 0 && segs[len(segs)-1] > 0
	})
	newest := filepath.Join(walDir, fmt.Sprintf("%08d", segs[len(segs)-1]))
	mustPush(t, s, "a", floatReq(base+6000, 4))
	if got := fsynced(); !slices.Contains(got, walDir) || !slices.Contains(got, newest) {
		t.Fatalf("sync after a new segment fsynced %v, want the WAL directory and %s", got, newest)
	}
	mustPush(t, s, "a", floatReq(base+7000, 5))
	if got := fsynced(); slices.Contains(got, walDir) || !slices.Equal(got, []string{newest}) {
		t.Fatalf("next sync fsynced %v, want only %s", got, newest)
	}
}
