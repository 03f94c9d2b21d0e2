package tsdbstore

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ferrylabs/ferry/internal/poll"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// floatReq is a request of one float sample of series x.
func floatReq(ts int64, v float64) *prompb.WriteRequest {
	return &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), float64(ts), v)}}
}

// serverError asserts that err is a server error.
func serverError(t *testing.T, err error) {
	t.Helper()
	var se *backend.ServerError
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T), want a server error", err, err)
	}
}

// syncUntilOK polls Sync until it succeeds, as the consumer's committer
// does on every tick.
func syncUntilOK(t *testing.T, s *Store) {
	t.Helper()
	poll.Until(t, 10*time.Second, 5*time.Millisecond, "a Sync succeeds after the recovery", func() bool {
		_, err := s.Sync(context.Background())
		return err == nil
	})
}

// TestVanishedStorageFailsSyncAndRecovers is the probe's scenario: the
// storage of a running store is removed; what was acknowledged before (and
// committed, or not yet) must survive, Sync must fail until it does, and
// the tenant must take writes again without a restart.
func TestVanishedStorageFailsSyncAndRecovers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove func(root string) string
	}{
		{"tenant directory", func(root string) string { return filepath.Join(root, testDB("a")) }},
		{"storage root", func(root string) string { return root }},
	} {
		for _, method := range syncMethods(t) {
			t.Run(tc.name+"/"+method, func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "storage")
				s := newTestStore(t, func(c *Config) { c.Path, c.SyncMethod = dir, method })
				ctx := context.Background()

				mustPush(t, s, "a", floatReq(base, 1)) // acknowledged and committed
				if _, err := s.Sync(ctx); err != nil {
					t.Fatal(err)
				}
				mustPush(t, s, "a", floatReq(base+1000, 2)) // acknowledged, not committed yet
				mustPush(t, s, "b", floatReq(base, 10))     // another tenant
				if err := os.RemoveAll(tc.remove(dir)); err != nil {
					t.Fatal(err)
				}
				// Nothing after the removal may be acknowledged.
				_, err := s.Push(ctx, "a", floatReq(base+2000, 3))
				serverError(t, err)
				// Sync succeeds again only once the recovery rewrote what
				// the tenants acknowledged.
				syncUntilOK(t, s)
				// The consumer resends what was answered SERVER_ERROR.
				mustPush(t, s, "a", floatReq(base+2000, 3))
				// Lost again, now found by a Sync: it must fail, so the
				// consumer commits nothing.
				if err := os.RemoveAll(tc.remove(dir)); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Sync(ctx); err == nil {
					t.Fatal("Sync succeeded with the tenant's storage gone")
				} else if !errors.Is(err, errStorageLost) {
					t.Fatalf("Sync: %v, want errStorageLost", err)
				}
				syncUntilOK(t, s)
				mustPush(t, s, "b", floatReq(base+1000, 11))
				if _, err := s.Sync(ctx); err != nil {
					t.Fatal(err)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}

				s2 := newTestStore(t, func(c *Config) { c.Path, c.SyncMethod = dir, method })
				if got := floatsOf(queryAll(t, s2, "a")[`{__name__="x"}`]); !slices.Equal(got, []float64{float64(base), 1, float64(base + 1000), 2, float64(base + 2000), 3}) {
					t.Errorf("tenant a after the reopen: %v", got)
				}
				if got := floatsOf(queryAll(t, s2, "b")[`{__name__="x"}`]); !slices.Equal(got, []float64{float64(base), 10, float64(base + 1000), 11}) {
					t.Errorf("tenant b after the reopen: %v", got)
				}
			})
		}
	}
}

// TestSyncFailsWhenOnlyTheWALVanished: without the WAL nothing the tenant
// acknowledged is on disk, even though its directory is still there.
func TestSyncFailsWhenOnlyTheWALVanished(t *testing.T) {
	for _, method := range syncMethods(t) {
		t.Run(method, func(t *testing.T) {
			s := newTestStore(t, func(c *Config) { c.SyncMethod = method })
			mustPush(t, s, "a", floatReq(base, 1))
			if err := os.RemoveAll(filepath.Join(s.cfg.Path, testDB("a"), "wal")); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Sync(context.Background()); !errors.Is(err, errStorageLost) {
				t.Fatalf("Sync: %v, want errStorageLost", err)
			}
			syncUntilOK(t, s)
			if got := floatsOf(queryAll(t, s, "a")[`{__name__="x"}`]); !slices.Equal(got, []float64{float64(base), 1}) {
				t.Errorf("after the recovery: %v", got)
			}
		})
	}
}

// TestReplacedTenantDirectoryIsDetected: a directory swapped for another
// one (a restore, a mistaken mv) is not where the open TSDB writes.
func TestReplacedTenantDirectoryIsDetected(t *testing.T) {
	for _, method := range syncMethods(t) {
		t.Run(method, func(t *testing.T) {
			s := newTestStore(t, func(c *Config) { c.SyncMethod = method })
			mustPush(t, s, "a", floatReq(base, 1))
			dir := filepath.Join(s.cfg.Path, testDB("a"))
			if err := os.Rename(dir, dir+".old"); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(dir, "wal"), 0o750); err != nil {
				t.Fatal(err)
			}
			_, err := s.Push(context.Background(), "a", floatReq(base+1000, 2))
			serverError(t, err)
			if !errors.Is(err, errStorageLost) {
				t.Fatalf("push: %v", err)
			}
			syncUntilOK(t, s)
			mustPush(t, s, "a", floatReq(base+1000, 2))
		})
	}
}

func TestSecondStoreOnOnePathIsRefused(t *testing.T) {
	s := newTestStore(t, nil)
	cfg := s.cfg
	_, err := New(cfg, nil, nil)
	if err == nil {
		t.Fatal("a second store opened the same path")
	}
	if !strings.Contains(err.Error(), cfg.Path) || !strings.Contains(err.Error(), "another ferry-pusher") {
		t.Fatalf("error %q does not name the path and the cause", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatalf("the path is still locked after Close: %v", err)
	}
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestFileWhereATenantDirectoryBelongs(t *testing.T) {
	var logs syncBuffer
	cfg := DefaultConfig()
	cfg.Path, cfg.Tenancy = t.TempDir(), testTenancy
	s, err := New(cfg, slog.New(slog.NewTextHandler(&logs, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	path := filepath.Join(cfg.Path, testDB("a"))
	if err := os.WriteFile(path, []byte("not a TSDB"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		_, err := s.Push(context.Background(), "a", floatReq(base, 1))
		serverError(t, err)
		if !errors.Is(err, errTenantNotDir) || !strings.Contains(err.Error(), path) {
			t.Fatalf("push: %v", err)
		}
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 {
		t.Fatalf("%d error lines for 5 pushes, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), path) {
		t.Fatalf("the log does not name %s:\n%s", path, logs.String())
	}
	// Once the operator moved it away, the tenant is stored.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	mustPush(t, s, "a", floatReq(base, 1))
}

func TestMaxTenants(t *testing.T) {
	s := newTestStore(t, func(c *Config) { c.MaxTenants = 2 })
	mustPush(t, s, "a", floatReq(base, 1))
	mustPush(t, s, "b", floatReq(base, 1))
	res, err := s.Push(context.Background(), "c", floatReq(base, 1))
	serverError(t, err)
	if !errors.Is(err, errTenantLimit) || res != (backend.Result{}) || !strings.Contains(err.Error(), "-pusher.max-tenants") {
		t.Fatalf("push beyond the limit: %+v, %v", res, err)
	}
	if status, retryAfter := backend.Classify(err); status != ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR || retryAfter != s.cfg.idleCheckInterval() {
		t.Fatalf("acknowledged %v with retry-after %v, want a server error with the idle check's %v", status, retryAfter, s.cfg.idleCheckInterval())
	}
	// Open tenants still take writes.
	mustPush(t, s, "a", floatReq(base+1000, 2))
}

// A tenant the pusher cannot open now is not bad data: it is refused as a
// server error, which the consumer retries without skipping anything, and
// admitted once an idle tenant closed and made room.
func TestATenantBeyondMaxTenantsIsAdmittedOnceAnIdleTenantClosed(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := DefaultConfig()
	cfg.Tenancy = testTenancy
	cfg.Path = t.TempDir()
	cfg.MaxTenants = 2
	cfg.IdleTimeout = 300 * time.Millisecond
	s, err := New(cfg, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	mustPush(t, s, "a", floatReq(base, 1))
	mustPush(t, s, "b", floatReq(base, 1))
	for _, push := range []func() error{
		func() error { _, err := s.Push(context.Background(), "c", floatReq(base, 1)); return err },
		func() error {
			out := make([]backend.Outcome, 2)
			return s.PushBatch(context.Background(), "c", []*prompb.WriteRequest{floatReq(base, 1), floatReq(base+1, 1)}, out)
		},
	} {
		err := push()
		serverError(t, err)
		if !errors.Is(err, errTenantLimit) {
			t.Fatalf("error %v, want the tenant limit", err)
		}
	}
	want := `
# HELP ferry_pusher_tsdb_capacity_refusals_total Writes answered SERVER_ERROR because the pusher has no room for their tenant now, by cause (tenant_limit: -pusher.max-tenants tenants are open); the consumer retries them and skips nothing.
# TYPE ferry_pusher_tsdb_capacity_refusals_total counter
ferry_pusher_tsdb_capacity_refusals_total{cause="tenant_limit"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ferry_pusher_tsdb_capacity_refusals_total"); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(s.metrics.samplesRejected.WithLabelValues("tenant_limit")); got != 0 {
		t.Fatalf("%v samples counted as rejected, want none: nothing is skipped", got)
	}
	// b keeps writing, a goes idle and closes: c gets its place.
	next := base
	poll.Until(t, 10*time.Second, 20*time.Millisecond, "tenant c is admitted after tenant a closed", func() bool {
		next += 1000
		mustPush(t, s, "b", floatReq(next, 1))
		_, err := s.Push(context.Background(), "c", floatReq(base, 1))
		if err != nil && !errors.Is(err, errTenantLimit) {
			t.Fatalf("error %v, want the tenant limit until a closes", err)
		}
		return err == nil
	})
	for _, st := range s.TenantStatuses(time.Now()) {
		if st.Open != (st.Tenant != "a") {
			t.Fatalf("tenant %s open: %v; want b and c open and a closed", st.Tenant, st.Open)
		}
	}
}

// TestQueryDoesNotKeepATenantOpen: a query of a closed tenant opens it for
// the query only, so reads cannot hold tenants (and -pusher.max-tenants
// slots) for the idle timeout.
func TestQueryDoesNotKeepATenantOpen(t *testing.T) {
	separateOnly(t, "it counts open TSDBs, one per tenant")
	dir := t.TempDir()
	s := newTestStore(t, func(c *Config) { c.Path = dir })
	mustPush(t, s, "a", floatReq(base, 1))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := newTestStore(t, func(c *Config) { c.Path = dir; c.IdleTimeout = time.Hour; c.MaxTenants = 1 })
	if got := floatsOf(queryAll(t, s2, "a")[`{__name__="x"}`]); !slices.Equal(got, []float64{float64(base), 1}) {
		t.Fatalf("query: %v", got)
	}
	waitOpen(t, s2, 0)
	// The slot is free for a writer.
	mustPush(t, s2, "b", floatReq(base, 1))
	// A tenant written to stays open after a query.
	queryAll(t, s2, "b")
	waitOpen(t, s2, 1)
}

func TestReadyFailsWithoutWritableStorage(t *testing.T) {
	s := newTestStore(t, nil)
	if err := s.Ready(); err != nil {
		t.Fatalf("ready: %v", err)
	}
	if err := os.RemoveAll(s.cfg.Path); err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(); err == nil || !strings.Contains(err.Error(), s.cfg.Path) {
		t.Fatalf("ready with the storage root gone: %v", err)
	}
	if err := os.WriteFile(s.cfg.Path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(); err == nil {
		t.Fatal("ready with a file as the storage root")
	}
}

// TestIdleCloseDoesNotDropALostTenant: a tenant whose directory vanished
// while it was idle holds its data only in memory; the idle close must
// recover it rather than close it.
func TestIdleCloseDoesNotDropALostTenant(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "storage")
	s := newTestStore(t, func(c *Config) { c.Path = dir; c.IdleTimeout = 20 * time.Millisecond })
	mustPush(t, s, "a", floatReq(base, 1))
	if _, err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, testDB("a"))); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, 5*time.Millisecond, "the tenant is recovered and closed as idle", func() bool {
		return tenantExists(filepath.Join(dir, testDB("a"))) && len(s.openTenantStats()) == 0
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := newTestStore(t, func(c *Config) { c.Path = dir })
	if got := floatsOf(queryAll(t, s2, "a")[`{__name__="x"}`]); !slices.Equal(got, []float64{float64(base), 1}) {
		t.Fatalf("after the idle close and a reopen: %v", got)
	}
}

// TestCloseRecoversALostTenant: at shutdown a lost tenant's head is
// written anew before the TSDB closes.
func TestCloseRecoversALostTenant(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "storage")
	s := newTestStore(t, func(c *Config) { c.Path = dir })
	mustPush(t, s, "a", floatReq(base, 1))
	if err := os.RemoveAll(filepath.Join(dir, testDB("a"))); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := newTestStore(t, func(c *Config) { c.Path = dir })
	if got := floatsOf(queryAll(t, s2, "a")[`{__name__="x"}`]); !slices.Equal(got, []float64{float64(base), 1}) {
		t.Fatalf("after Close and a reopen: %v", got)
	}
}

// TestAReplacedWALIsFoundBeforeAnAppend: a WAL directory removed and made
// anew (empty, at the same path) is not the one the TSDB writes to; the
// next push must be refused, as for a vanished one, and the recovery keeps
// what the tenant acknowledged.
func TestAReplacedWALIsFoundBeforeAnAppend(t *testing.T) {
	s := newTestStore(t, nil)
	mustPush(t, s, "a", floatReq(base, 1))
	wal := filepath.Join(s.cfg.Path, testDB("a"), "wal")
	if err := os.RemoveAll(wal); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(wal, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := s.Push(context.Background(), "a", floatReq(base+1000, 2))
	serverError(t, err)
	if !strings.Contains(err.Error(), "WAL directory") {
		t.Errorf("push: %v, want it to name the WAL directory", err)
	}
	syncUntilOK(t, s)
	mustPush(t, s, "a", floatReq(base+1000, 2))
	if got := floatsOf(queryAll(t, s, "a")[`{__name__="x"}`]); !slices.Equal(got, []float64{float64(base), 1, float64(base + 1000), 2}) {
		t.Errorf("after the recovery: %v", got)
	}
}
