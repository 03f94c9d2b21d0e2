package tsdbstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/ferrylabs/ferry/internal/poll"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// Tests of what only the shared tenancy has. The package's other tests run
// in it too (FERRY_TEST_TENANCY=shared, tenancy_test.go).

func newSharedStore(t *testing.T, modify func(*Config)) *Store {
	t.Helper()
	return newTestStore(t, func(c *Config) {
		c.Tenancy = TenancyShared
		if modify != nil {
			modify(c)
		}
	})
}

func oneSeries(name string, v float64, kv ...string) *prompb.WriteRequest {
	return &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls(append([]string{"__name__", name}, kv...)...), float64(base), v)}}
}

// rawSeries opens the TSDB at dir directly and returns the label sets it
// stores.
func rawSeries(t *testing.T, dir string) []string {
	t.Helper()
	q, closeRaw := openRaw(t, dir)
	defer closeRaw()
	var out []string
	ss := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"))
	for ss.Next() {
		out = append(out, ss.At().Labels().String())
	}
	if err := ss.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSharedTenancyKeepsEveryTenantInOneTSDB(t *testing.T) {
	s := newSharedStore(t, nil)
	for i := range 20 {
		mustPush(t, s, fmt.Sprintf("tenant-%02d", i), oneSeries("m", float64(i), "job", "j"))
	}
	n, err := s.Sync(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("Sync = %d, %v; want the one shared TSDB synced", n, err)
	}
	path := s.cfg.Path
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var dirs []string
	entries, err := os.ReadDir(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range withoutLockFile(entries) {
		dirs = append(dirs, e.Name())
	}
	if !slices.Equal(dirs, []string{sharedDirName}) {
		t.Fatalf("the storage path holds %v, want only %s", dirs, sharedDirName)
	}
	// The tenant is a label, sorted among the others.
	got := rawSeries(t, filepath.Join(path, sharedDirName))
	if len(got) != 20 || got[3] != `{__ferry_tenant__="tenant-03", __name__="m", job="j"}` {
		t.Fatalf("the shared TSDB stores %d series, the fourth %q", len(got), got[3])
	}

	// Reopened, every tenant is found and reads its own value.
	cfg := s.cfg
	s2, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if tenants := s2.Tenants(); len(tenants) != 20 || tenants[7] != "tenant-07" {
		t.Fatalf("Tenants() after reopening = %v", tenants)
	}
	got7 := queryAll(t, s2, "tenant-07")
	if v := floatsOf(got7[`{__name__="m", job="j"}`]); !slices.Equal(v, []float64{float64(base), 7}) {
		t.Fatalf("tenant-07 reads %v", got7)
	}
}

func TestSharedTenancyAddsTheTenantWhereItSorts(t *testing.T) {
	s := newSharedStore(t, nil)
	// Names on both sides of the tenant label, sent sorted and unsorted,
	// and an empty value (absent) of the tenant label itself.
	mustPush(t, s, "a", oneSeries("m", 1, "A", "1", "__a", "2", "z", "3"))
	mustPush(t, s, "a", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		floats(lbls("z", "3", "__name__", "n", "A", "1"), float64(base), 2),
		floats(lbls("__name__", "o", tenantLabel, ""), float64(base), 3),
	}})
	got := queryAll(t, s, "a")
	for _, want := range []string{`{A="1", __a="2", __name__="m", z="3"}`, `{A="1", __name__="n", z="3"}`, `{__name__="o"}`} {
		if _, ok := got[want]; !ok {
			t.Errorf("tenant a does not read %s; it reads %v", want, got)
		}
	}
	path := s.cfg.Path
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	raw := rawSeries(t, filepath.Join(path, sharedDirName))
	want := []string{
		`{A="1", __a="2", __ferry_tenant__="a", __name__="m", z="3"}`,
		`{A="1", __ferry_tenant__="a", __name__="n", z="3"}`,
		`{__ferry_tenant__="a", __name__="o"}`,
	}
	if !slices.Equal(raw, want) {
		t.Fatalf("stored %v, want %v", raw, want)
	}
}

func TestSharedTenancyRefusesTheTenantLabel(t *testing.T) {
	s := newSharedStore(t, nil)
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		floats(lbls("__name__", "m", tenantLabel, "b"), float64(base), 1, float64(base+1000), 2),
		floats(lbls("__name__", "ok"), float64(base), 1),
		// Unsorted, after a name that sorts after the tenant label.
		floats(lbls("z", "1", tenantLabel, "b", "__name__", "m"), float64(base), 1),
	}}
	res, err := s.Push(context.Background(), "a", req)
	if res != (backend.Result{Accepted: 1, Rejected: 3}) || !errors.Is(err, errReservedLabel) {
		t.Fatalf("result %+v, error %v; want 1 accepted and 3 refused for the reserved label", res, err)
	}
	ce := clientError(t, err)
	if !strings.Contains(ce.Reason, tenantLabel) || !strings.Contains(ce.Reason, "-storage.tenancy=shared") {
		t.Errorf("reason %q does not name the label and the flag", ce.Reason)
	}
	if want := `for series {__ferry_tenant__="b", __name__="m"}`; !strings.Contains(ce.Reason, want) {
		t.Errorf("reason %q does not name the series as sent, %s", ce.Reason, want)
	}
	if got := queryAll(t, s, "b"); len(got) != 0 {
		t.Fatalf("tenant a wrote into tenant b: %v", got)
	}
}

func TestSharedTenancyRecountsSeriesAtTheLimit(t *testing.T) {
	s := newSharedStore(t, func(c *Config) { c.MaxSeriesPerTenant = 3 })
	mustPush(t, s, "a", oneSeries("m", 1, "i", "0"))
	mustPush(t, s, "a", oneSeries("m", 1, "i", "1"))
	td := s.tenants.byID[sharedDirName]
	// A count at the limit, as after series the head dropped since: the
	// count is redone before a sample is refused for it.
	td.seriesMu.Lock()
	td.seriesCounts["a"] = &seriesCount{n: 3, counted: time.Now().Add(-time.Minute)}
	td.seriesMu.Unlock()
	mustPush(t, s, "a", oneSeries("m", 1, "i", "2"))
	// Now it holds.
	res, err := s.Push(context.Background(), "a", oneSeries("m", 1, "i", "3"))
	if res.Rejected != 1 || !errors.Is(err, errSeriesLimit) {
		t.Fatalf("result %+v, error %v; want the fourth series refused", res, err)
	}
	// A fresh count at the limit is trusted: no recount per refused sample.
	td.seriesMu.Lock()
	td.seriesCounts["a"] = &seriesCount{n: 3, counted: time.Now()}
	td.seriesMu.Unlock()
	if _, err := s.Push(context.Background(), "a", oneSeries("m", 1, "i", "4")); !errors.Is(err, errSeriesLimit) {
		t.Fatalf("error %v, want the series limit", err)
	}
}

func TestSharedTenancyLimitsActiveTenants(t *testing.T) {
	s := newSharedStore(t, func(c *Config) {
		c.MaxTenants = 2
		c.IdleTimeout = 200 * time.Millisecond
	})
	mustPush(t, s, "a", oneSeries("m", 1))
	mustPush(t, s, "b", oneSeries("m", 1))
	res, err := s.Push(context.Background(), "c", oneSeries("m", 1))
	if res != (backend.Result{}) || !errors.Is(err, errTenantLimit) {
		t.Fatalf("result %+v, error %v; want tenant c refused while a and b are active", res, err)
	}
	if serverError(t, err); !strings.Contains(err.Error(), "-pusher.max-tenants") {
		t.Errorf("reason %q does not name the flag", err)
	}
	// Idle for the timeout, a and b stop counting.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.Push(context.Background(), "c", oneSeries("m", 2))
		if err == nil {
			break
		}
		if !errors.Is(err, errTenantLimit) || time.Now().After(deadline) {
			t.Fatalf("tenant c still refused after a and b were idle: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	st := s.TenantStatuses(time.Now())
	if len(st) != 3 || !st[2].Open || st[2].HeadSeries != 1 || st[0].Open {
		t.Fatalf("statuses %+v; want a, b closed and c open with 1 series", st)
	}
}

func TestAStoragePathKeepsItsTenancy(t *testing.T) {
	for _, tc := range []struct{ wrote, opens, want string }{
		{TenancySeparate, TenancyShared, "-storage.tenancy=separate"},
		{TenancyShared, TenancySeparate, "-storage.tenancy=shared"},
	} {
		t.Run(tc.wrote, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Path, cfg.Tenancy = t.TempDir(), tc.wrote
			s, err := New(cfg, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			mustPush(t, s, "a", oneSeries("m", 1))
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			cfg.Tenancy = tc.opens
			s, err = New(cfg, nil, nil)
			if err == nil {
				_ = s.Close()
				t.Fatalf("a store in the %s tenancy opened a path written in the %s tenancy", tc.opens, tc.wrote)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), cfg.Path) {
				t.Errorf("error %q does not name the path and %s", err, tc.want)
			}
			// The lock was released: the right tenancy opens it.
			cfg.Tenancy = tc.wrote
			s, err = New(cfg, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := queryAll(t, s, "a"); len(got) != 1 {
				t.Errorf("tenant a reads %v after reopening", got)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestTheSharedDirectoryIsNoTenant(t *testing.T) {
	for _, tenancy := range []string{TenancySeparate, TenancyShared} {
		t.Run(tenancy, func(t *testing.T) {
			s := newTestStore(t, func(c *Config) { c.Tenancy = tenancy })
			res, err := s.Push(context.Background(), sharedDirName, oneSeries("m", 1))
			if res.Rejected != 1 || !errors.Is(err, errInvalidTenant) {
				t.Fatalf("result %+v, error %v; want the tenant ID refused", res, err)
			}
		})
	}
}

func TestSharedTenancyWarnsOfItsTimeWindow(t *testing.T) {
	for _, window := range []time.Duration{0, 2 * time.Hour} {
		var logs syncBuffer
		cfg := DefaultConfig()
		cfg.Path, cfg.Tenancy, cfg.OutOfOrderWindow = t.TempDir(), TenancyShared, window
		s, err := New(cfg, slog.New(slog.NewTextHandler(&logs, nil)), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		warned := strings.Contains(logs.String(), "-storage.out-of-order-window")
		if warned != (window == 0) {
			t.Errorf("out-of-order window %v: warned %v; logs:\n%s", window, warned, logs.String())
		}
	}
}

func TestReadsKeepTheSharedTSDBOpenUntilIdle(t *testing.T) {
	dir := t.TempDir()
	s := newSharedStore(t, func(c *Config) { c.Path = dir })
	mustPush(t, s, "a", oneSeries("m", 1))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := newSharedStore(t, func(c *Config) { c.Path = dir; c.IdleTimeout = 300 * time.Millisecond })
	queryAll(t, s2, "a")
	// Reopening the shared TSDB replays every tenant's WAL: a read keeps
	// it open for the idle timeout rather than closing it at once.
	time.Sleep(50 * time.Millisecond)
	open := func() bool {
		td := s2.tenants.peekOpen(sharedDirName)
		if td != nil {
			s2.tenants.unpeek(td)
		}
		return td != nil
	}
	if !open() {
		t.Fatal("the shared TSDB closed right after a read")
	}
	deadline := time.Now().Add(10 * time.Second)
	for open() {
		if time.Now().After(deadline) {
			t.Fatal("the shared TSDB opened by a read is still open 10s after the idle timeout")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSharedTenancyReadsItsBlocks(t *testing.T) {
	s := newSharedStore(t, nil)
	old, recent := float64(base-4*time.Hour.Milliseconds()), float64(base)
	for i, tenant := range []string{"a", "b"} {
		mustPush(t, s, tenant, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
			floats(lbls("__name__", "m", "job", "j"), old, float64(i+1)),
		}})
	}
	for i, tenant := range []string{"a", "b"} {
		mustPush(t, s, tenant, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
			floats(lbls("__name__", "m", "job", "j"), recent, float64(10*(i+1))),
		}})
	}
	// The head spans four hours: compacting it writes the oldest two
	// into a block, which the tenants' reads must find as they found the
	// head.
	td := s.tenants.peekOpen(sharedDirName)
	if td == nil {
		t.Fatal("the shared TSDB is not open")
	}
	// CompactHead, not Compact: the TSDB delays its own compactions
	// (openDB), by minutes.
	mint := int64(old)
	err := td.db.CompactHead(tsdb.NewRangeHeadWithIsolationDisabled(td.db.Head(), mint, mint+2*time.Hour.Milliseconds()-1))
	blocks := len(td.db.Blocks())
	s.tenants.unpeek(td)
	if err != nil || blocks == 0 {
		t.Fatalf("compact the head: %v, %d blocks", err, blocks)
	}
	for i, tenant := range []string{"a", "b"} {
		got := floatsOf(queryAll(t, s, tenant)[`{__name__="m", job="j"}`])
		if want := []float64{old, float64(i + 1), recent, float64(10 * (i + 1))}; !slices.Equal(got, want) {
			t.Errorf("tenant %s reads %v from block and head, want %v", tenant, got, want)
		}
	}
	if got := s.Tenants(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Tenants() = %v", got)
	}
}

// TestSharedTSDBIsReplayedBeforeReady: restarted on a path that holds the
// shared TSDB, the store opens it (replaying its WAL) on its own, and is
// not ready until it did; a fresh path is ready at once and stays empty.
func TestSharedTSDBIsReplayedBeforeReady(t *testing.T) {
	fresh := newSharedStore(t, nil)
	if err := fresh.Ready(); err != nil {
		t.Fatalf("a fresh store is not ready: %v", err)
	}
	if tenantExists(filepath.Join(fresh.cfg.Path, sharedDirName)) {
		t.Fatal("a fresh store created the shared TSDB before any write")
	}

	mustPush(t, fresh, "a", oneSeries("m", 1, "job", "j"))
	cfg := fresh.cfg
	if err := fresh.Close(); err != nil {
		t.Fatal(err)
	}

	hold := make(chan struct{})
	testHookEarlyOpen = func(path string) {
		if path == cfg.Path {
			<-hold
		}
	}
	t.Cleanup(func() { testHookEarlyOpen = nil })
	s, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Ready()
	if err == nil || !strings.Contains(err.Error(), "replaying") {
		t.Fatalf("Ready() while the shared TSDB opens = %v, want an error naming the replay", err)
	}
	close(hold)
	poll.Until(t, 30*time.Second, 5*time.Millisecond, "the store ready once the replay was let go", func() bool { return s.Ready() == nil })
	// Open before any request, with the series replayed.
	db := s.tenants.peekOpen(sharedDirName)
	if db == nil {
		t.Fatal("ready, but the shared TSDB is not open")
	}
	n := db.db.Head().NumSeries()
	s.tenants.unpeek(db)
	if n != 1 {
		t.Fatalf("the replayed head has %d series, want 1", n)
	}
}
