package tsdbstore

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunks"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// TestSeriesCacheComparesLabels: an entry is found only for the labels it
// was put for, so two series whose keys collide are never taken for one
// another, and nothing is found once the head reported a removal.
func TestSeriesCacheComparesLabels(t *testing.T) {
	c := newSeriesCache()
	a, b := labels.FromStrings("x", "a"), labels.FromStrings("x", "b")
	reqA, reqB := lbls("x", "a"), lbls("x", "b")
	c.put(7, 3, a, c.epoch())
	for _, req := range [][]prompb.Label{reqB, lbls("x", "a", "y", "b"), lbls("x", "ab"), nil} {
		if ref, _ := c.get(7, req, c.epoch()); ref != 0 {
			t.Fatalf("labels %v with the same key found ref %d", req, ref)
		}
	}
	if ref, ls := c.get(7, reqA, c.epoch()); ref != 3 || !labels.Equal(ls, a) {
		t.Fatalf("got %d %s, want 3 %s", ref, ls, a)
	}
	before := c.epoch()
	c.PostDeletion(map[chunks.HeadSeriesRef]labels.Labels{})
	if c.epoch() != before {
		t.Fatal("a report of no removal counted as one")
	}
	c.PostDeletion(map[chunks.HeadSeriesRef]labels.Labels{9: labels.FromStrings("x", "z")})
	// An entry found before the removal was reported is not kept.
	c.put(8, 4, b, before)
	if ref, _ := c.get(7, reqA, c.epoch()); ref != 0 {
		t.Fatalf("found ref %d after a removal", ref)
	}
	if ref, _ := c.get(8, reqB, c.epoch()); ref != 0 {
		t.Fatalf("found ref %d put with an epoch before a removal", ref)
	}
	c.put(7, 5, a, c.epoch())
	if ref, _ := c.get(7, reqA, c.epoch()); ref != 5 {
		t.Fatalf("got ref %d after the removal, want 5", ref)
	}
}

// TestSeriesCacheKeysOnlySeriesLabels: the cache keys a request's labels
// only when they are the series' labels as they stand, sorted and none
// empty; the others are looked up in the head (and may name the same
// series, see TestLabelOrderDoesNotMatter).
func TestSeriesCacheKeysOnlySeriesLabels(t *testing.T) {
	c := newSeriesCache()
	for _, tc := range []struct {
		req   []prompb.Label
		keyed bool
	}{
		{lbls("__name__", "up", "job", "a"), true},
		{lbls("job", "a", "__name__", "up"), false},
		{lbls("__name__", "up", "job", "a", "x", ""), false},
		{lbls("__name__", "up", "job", "a", "job", "a"), false},
		{lbls("", "v", "job", "a"), false},
	} {
		if _, keyed := c.hash(tc.req); keyed != tc.keyed {
			t.Errorf("%v: keyed %v, want %v", tc.req, keyed, tc.keyed)
		}
	}
	k1, _ := c.hash(lbls("a", "bc", "d", "e"))
	k2, _ := c.hash(lbls("a", "b", "cd", "e"))
	if k1 == k2 {
		t.Error("labels that differ only in where names end share a key")
	}
}

// truncateHead makes tenant's head drop everything before mint, and so
// remove the series that had samples only before it, as its compaction
// does: what the series cache must notice.
func truncateHead(t *testing.T, s *Store, tenant string, mint int64) {
	t.Helper()
	s.mu.Lock()
	tdb := s.tenants[tenant]
	s.mu.Unlock()
	if err := tdb.db.Head().Truncate(mint); err != nil {
		t.Fatal(err)
	}
}

// TestSeriesLimitAfterTheHeadRemovedASeries: a series the head removed is
// a new series when it comes back, and the series limit applies to it; a
// cache that still knew its reference would let Append create it past the
// limit.
func TestSeriesLimitAfterTheHeadRemovedASeries(t *testing.T) {
	s := newTestStore(t, func(c *Config) { c.MaxSeriesPerTenant = 2 })
	a, b, c := lbls("__name__", "m", "s", "a"), lbls("__name__", "m", "s", "b"), lbls("__name__", "m", "s", "c")
	later := base + (10 * time.Minute).Milliseconds()
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(a, float64(base), 1), floats(b, float64(base), 1)}})
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(b, float64(later), 2)}})
	truncateHead(t, s, "t", base+(5*time.Minute).Milliseconds())
	if n := s.tenants["t"].db.Head().NumSeries(); n != 1 {
		t.Fatalf("%d series after the truncation, want 1 (b)", n)
	}
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(c, float64(later), 3)}})
	res, err := s.Push(context.Background(), "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(a, float64(later+1000), 4)}})
	if ce := clientError(t, err); res.Rejected != 1 || res.Accepted != 0 {
		t.Fatalf("a's return: %+v (%v), want its sample rejected by the series limit", res, ce)
	}
	if n := s.tenants["t"].db.Head().NumSeries(); n != 2 {
		t.Fatalf("%d series, want the limit of 2", n)
	}
}

// TestSeriesCacheOfAReopenedTenant: a tenant whose storage was lost is
// reopened with a fresh TSDB (recover.go), whose head numbers the series
// afresh; the references of the old head name other series there, and a
// series must still get its own samples. The old head's first series was
// removed, so the fresh head gives the others lower references than the
// old one did.
func TestSeriesCacheOfAReopenedTenant(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "storage")
	s := newTestStore(t, func(c *Config) { c.Path = dir })
	z, p, q := lbls("__name__", "m", "s", "z"), lbls("__name__", "m", "s", "p"), lbls("__name__", "m", "s", "q")
	later := base + (10 * time.Minute).Milliseconds()
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(z, float64(base), 0)}})
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(p, float64(later), 1), floats(q, float64(later), 10)}})
	truncateHead(t, s, "t", base+(5*time.Minute).Milliseconds())
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(p, float64(later+1000), 2), floats(q, float64(later+1000), 20)}})

	if err := os.RemoveAll(filepath.Join(dir, "t")); err != nil {
		t.Fatal(err)
	}
	_, err := s.Push(context.Background(), "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(p, float64(later+2000), 3)}})
	serverError(t, err)
	syncUntilOK(t, s)
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(p, float64(later+2000), 3)}})
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(q, float64(later+2000), 30)}})

	got := queryAll(t, s, "t")
	for ls, want := range map[string][]float64{
		toLabels(p).String(): {float64(later), 1, float64(later + 1000), 2, float64(later + 2000), 3},
		toLabels(q).String(): {float64(later), 10, float64(later + 1000), 20, float64(later + 2000), 30},
	} {
		if f := floatsOf(got[ls]); !slices.Equal(f, want) {
			t.Errorf("%s: stored %v, want %v", ls, f, want)
		}
	}
	if len(got) != 2 {
		t.Errorf("%d series stored, want 2: %v", len(got), got)
	}
}

// TestSeriesCacheIsUsed: in steady state every series of a request is
// found in the cache, and a second appender of the tenant while the first
// holds it does without.
func TestSeriesCacheIsUsed(t *testing.T) {
	s := newTestStore(t, nil)
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		floats(lbls("__name__", "m", "s", "a"), float64(base), 1),
		floats(lbls("__name__", "m", "s", "b"), float64(base), 1),
	}}
	mustPush(t, s, "t", req)
	tdb := s.tenants["t"]
	c := tdb.cache.Load()
	if c == nil || c.db != tdb.db {
		t.Fatal("no series cache for the tenant's TSDB")
	}
	if len(c.entries) != 2 {
		t.Fatalf("%d series cached, want 2", len(c.entries))
	}
	a, err := s.newAppender(context.Background(), tdb)
	if err != nil {
		t.Fatal(err)
	}
	if a.cache != c {
		t.Fatal("the appender did not get the cache")
	}
	other, err := s.newAppender(context.Background(), tdb)
	if err != nil {
		t.Fatal(err)
	}
	if other.cache != nil {
		t.Fatal("a second appender got the cache the first holds")
	}
	other.rollback()
	a.rollback()
	if again := acquireCache(tdb, tdb.db); again != c {
		t.Fatal("the cache was not released by rollback")
	} else {
		again.release()
	}
}
