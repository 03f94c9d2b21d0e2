package tsdbstore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunks"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// TestCacheKeyNamesOneListOfLabels: two lists of labels share a key only
// when they are the same list, names and values in the same order; where a
// name or value ends is part of the key.
func TestCacheKeyNamesOneListOfLabels(t *testing.T) {
	lists := [][]prompb.Label{
		lbls("a", "bc", "d", "e"),
		lbls("a", "b", "cd", "e"),
		lbls("ab", "c", "d", "e"),
		lbls("d", "e", "a", "bc"),
		lbls("a", "bc", "d", "e", "f", ""),
		lbls("a", "bc", "d", "e", "", ""),
		lbls("a", "bc"),
		lbls("a", "bc\x01d\x01e"),
		nil,
	}
	seen := map[string]int{}
	for i, ls := range lists {
		key := string(cacheKey(nil, ls))
		if j, ok := seen[key]; ok {
			t.Errorf("%v and %v share the key %q", lists[j], ls, key)
		}
		seen[key] = i
		if again := string(cacheKey([]byte("reused"), ls)); again != "reused"+key {
			t.Errorf("%v: key appended to a buffer is %q, want %q", ls, again, "reused"+key)
		}
	}
}

// TestSeriesCacheEntries: every spelling of a series names its one entry;
// an entry's last sample is its appender's only; a reported removal of
// series makes the references untrusted while the appender holds the
// cache and empties it for the next; histograms are not kept past release.
func TestSeriesCacheEntries(t *testing.T) {
	cs := newSeriesCaches()
	c := cs.acquire(nil, "t")
	if c == nil {
		t.Fatal("no cache")
	}
	sorted, unsorted := lbls("x", "a", "y", "b"), lbls("y", "b", "x", "a")
	ls := labels.FromStrings("x", "a", "y", "b")
	if i := c.lookup(sorted); i != -1 {
		t.Fatalf("empty cache found entry %d", i)
	}
	if i := c.find(ls, false); i != -1 {
		t.Fatalf("empty cache found entry %d for the built labels", i)
	}
	i := c.remember(-1)
	last := lastAppended{val: point{t: 1, v: 2}, ok: true}
	c.set(i, 3, ls, last)
	if j := c.lookup(unsorted); j != -1 {
		t.Fatalf("a spelling never added found entry %d", j)
	}
	if j := c.find(ls, false); j != i {
		t.Fatalf("the unsorted spelling's built labels found entry %d, want %d", j, i)
	}
	if j := c.remember(i); j != i {
		t.Fatalf("the unsorted spelling got entry %d, want %d", j, i)
	}
	for _, spelling := range [][]prompb.Label{sorted, unsorted} {
		if j := c.lookup(spelling); j != i || c.series[j].ref != 3 || !labels.Equal(c.series[j].ls, ls) || c.lastOf(j) != last {
			t.Fatalf("%v: entry %d %+v, want %d with ref 3 and the last sample", spelling, j, c.series[max(j, 0)], i)
		}
	}
	if !c.trusted() {
		t.Fatal("not trusted before any removal")
	}
	c.set(i, 0, labels.EmptyLabels(), lastAppended{val: point{t: 5, h: &histogram.Histogram{}}, ok: true})
	c.release()
	if c.series[i].last.val.h != nil {
		t.Fatal("a histogram kept past release")
	}

	c = cs.acquire(nil, "t")
	if j := c.lookup(sorted); j != i || c.series[j].ref != 3 {
		t.Fatalf("entry %d lost between appenders", j)
	}
	if got := c.lastOf(i); got.ok {
		t.Fatalf("the next appender got the last sample %+v of the one before", got)
	}
	cs.PostDeletion(map[chunks.HeadSeriesRef]labels.Labels{})
	if !c.trusted() {
		t.Fatal("a report of no removal counted as one")
	}
	c.set(i, 0, labels.EmptyLabels(), last)
	cs.PostDeletion(map[chunks.HeadSeriesRef]labels.Labels{9: labels.FromStrings("x", "z")})
	if c.trusted() {
		t.Fatal("references trusted after a removal")
	}
	if c.lookup(unsorted) != i || c.lastOf(i) != last {
		t.Fatal("the holder lost its last samples to a removal")
	}
	c.release()
	c = cs.acquire(nil, "t")
	defer c.release()
	if j := c.lookup(sorted); j != -1 || !c.trusted() {
		t.Fatalf("after a removal the next appender found entry %d (trusted %v), want an empty cache", j, c.trusted())
	}
}

// TestCachedSeriesKeepTheirOwnSamples: series whose labels differ only in
// where a name or value ends, or only in their tenant, keep their own
// samples once their references come from the cache, and spellings of one
// series that the cache keys apart still name that series.
func TestCachedSeriesKeepTheirOwnSamples(t *testing.T) {
	s := newTestStore(t, nil)
	lookalikes := [][]prompb.Label{
		lbls("__name__", "m", "a", "bc"),
		lbls("__name__", "m", "ab", "c"),
		lbls("__name__", "m", "a", "b", "c", "x"),
	}
	spellings := [][]prompb.Label{
		lbls("__name__", "up", "job", "a"),
		lbls("job", "a", "__name__", "up"),
		lbls("__name__", "up", "job", "a", "x", ""),
	}
	want := map[string]map[string][]float64{}
	for round := range 3 {
		ts := float64(base + int64(round)*1000)
		for ti, tenant := range []string{"t1", "t2"} {
			if want[tenant] == nil {
				want[tenant] = map[string][]float64{}
			}
			var series []prompb.TimeSeries
			for i, ls := range lookalikes {
				v := float64(100*ti + 10*i + round)
				series = append(series, floats(ls, ts, v))
				name := toLabels(ls).String()
				want[tenant][name] = append(want[tenant][name], ts, v)
			}
			// One spelling a round: each is new to the cache once.
			v := float64(100*ti + 50 + round)
			series = append(series, floats(spellings[round], ts, v))
			name := toLabels(spellings[0]).String()
			want[tenant][name] = append(want[tenant][name], ts, v)
			mustPush(t, s, tenant, &prompb.WriteRequest{Timeseries: series})
			// The same series again a moment later, every one now cached.
			series = series[:0]
			for i, ls := range lookalikes {
				v := float64(1000 + 100*ti + 10*i + round)
				series = append(series, floats(ls, ts+500, v))
				name := toLabels(ls).String()
				want[tenant][name] = append(want[tenant][name], ts+500, v)
			}
			mustPush(t, s, tenant, &prompb.WriteRequest{Timeseries: series})
		}
	}
	for tenant, series := range want {
		got := queryAll(t, s, tenant)
		if len(got) != len(series) {
			t.Errorf("tenant %s: %d series stored, want %d: %v", tenant, len(got), len(series), got)
		}
		for name, w := range series {
			if f := floatsOf(got[name]); !slices.Equal(f, w) {
				t.Errorf("tenant %s, %s: stored %v, want %v", tenant, name, f, w)
			}
		}
	}
}

// truncateHead makes the head holding tenant's series drop everything
// before mint, and so remove the series that had samples only before it,
// as its compaction does: what the series cache must notice.
func truncateHead(t *testing.T, s *Store, tenant string, mint int64) {
	t.Helper()
	s.tenants.mu.Lock()
	tdb := s.tenants.byID[s.cfg.dbID(tenant)]
	s.tenants.mu.Unlock()
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
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(a, float64(base+1000), 1), floats(b, float64(later), 2)}})
	truncateHead(t, s, "t", base+(5*time.Minute).Milliseconds())
	if n := s.tenants.byID[s.cfg.dbID("t")].db.Head().NumSeries(); n != 1 {
		t.Fatalf("%d series after the truncation, want 1 (b)", n)
	}
	if testTenancy == TenancyShared {
		// The shared TSDB counts a tenant's series again at the limit
		// only once the count is seriesRecountAfter old: make it so.
		td := s.tenants.byID[sharedDirName]
		td.seriesMu.Lock()
		if c := td.seriesCounts["t"]; c != nil {
			c.counted = time.Time{}
		}
		td.seriesMu.Unlock()
	}
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(c, float64(later), 3)}})
	res, err := s.Push(context.Background(), "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(a, float64(later+1000), 4)}})
	if ce := clientError(t, err); res.Rejected != 1 || res.Accepted != 0 {
		t.Fatalf("a's return: %+v (%v), want its sample rejected by the series limit", res, ce)
	}
	if n := s.tenants.byID[s.cfg.dbID("t")].db.Head().NumSeries(); n != 2 {
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

	if err := os.RemoveAll(filepath.Join(dir, testDB("t"))); err != nil {
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
// found in its tenant's cache, and a second appender of the tenant while
// the first holds it does without; another tenant of the shared TSDB has a
// cache of its own.
func TestSeriesCacheIsUsed(t *testing.T) {
	s := newTestStore(t, nil)
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		floats(lbls("__name__", "m", "s", "a"), float64(base), 1),
		floats(lbls("__name__", "m", "s", "b"), float64(base), 1),
	}}
	mustPush(t, s, "t", req)
	tdb := s.tenants.byID[s.cfg.dbID("t")]
	ctx := context.Background()
	a, err := s.write.newBatch(ctx, tdb, "t")
	if err != nil {
		t.Fatal(err)
	}
	if a.cache == nil || a.cache.owner.db != tdb.db {
		t.Fatal("the batch got no series cache of the tenant's TSDB")
	}
	if n := len(a.cache.series); n != 2 {
		t.Fatalf("%d series cached, want 2", n)
	}
	other, err := s.write.newBatch(ctx, tdb, "t")
	if err != nil {
		t.Fatal(err)
	}
	if other.cache != nil {
		t.Fatal("a second batch got the cache the first holds")
	}
	other.rollback()
	if testTenancy == TenancyShared {
		u, err := s.write.newBatch(ctx, tdb, "u")
		if err != nil {
			t.Fatal(err)
		}
		if u.cache == nil || u.cache == a.cache {
			t.Fatalf("tenant u's batch got cache %p, tenant t's is %p: want one of its own", u.cache, a.cache)
		}
		u.rollback()
	}
	held := a.cache
	a.rollback()
	again, err := s.write.newBatch(ctx, tdb, "t")
	if err != nil {
		t.Fatal(err)
	}
	defer again.rollback()
	if again.cache != held {
		t.Fatal("the cache was not released by rollback")
	}
}

// TestSeriesCacheIsBounded: the cache remembers only series the head has,
// and one spelling of a series besides its sorted one, so that series
// refused by the series limit or for their timestamps, and a sender that
// spells one series in ever new ways, cannot grow it.
func TestSeriesCacheIsBounded(t *testing.T) {
	s := newTestStore(t, func(c *Config) { c.MaxSeriesPerTenant = 10 })
	ctx := context.Background()
	for i := range 30 {
		req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
			floats(lbls("__name__", "m", "s", fmt.Sprint(i)), float64(base), 1),                             // over the limit from the 11th
			floats(lbls("__name__", "old", "s", fmt.Sprint(i)), 1000, 1),                                    // far too old: not appended
			floats(lbls("s", "0", "__name__", "m"), float64(base+int64(i)+1), 1),                            // series 0, unsorted
			floats(lbls("__name__", "m", fmt.Sprintf("e%d", i), "", "s", "0"), float64(base+int64(i)+1), 1), // series 0, a new spelling each time
		}}
		if _, err := s.Push(ctx, "t", req); err != nil && !backend.IsClientError(err) {
			t.Fatal(err)
		}
	}
	a, err := s.write.newBatch(ctx, s.tenants.byID[s.cfg.dbID("t")], "t")
	if err != nil {
		t.Fatal(err)
	}
	defer a.rollback()
	if a.cache == nil {
		t.Fatal("no series cache")
	}
	// Only tenant t wrote: in the shared TSDB too, the head's series are
	// its series.
	head := s.tenants.byID[s.cfg.dbID("t")].db.Head().NumSeries()
	if n := len(a.cache.series); uint64(n) != head || head == 0 || head > 10 {
		t.Errorf("%d series cached, want the %d the head has (at most the limit of 10)", n, head)
	}
	if n := len(a.cache.index); n > 2*len(a.cache.series) {
		t.Errorf("%d keys for %d series, want at most two each", n, len(a.cache.series))
	}
	got := queryAll(t, s, "t")
	if v := floatsOf(got[`{__name__="m", s="0"}`]); len(v) != 2*31 {
		t.Errorf("series 0 stored %d samples, want 31: %v", len(v)/2, v)
	}
}

// TestSeriesCachesLetGoOfQuietTenants: a reported removal of series drops
// the caches no appender holds, so that a tenant of the shared TSDB that
// stopped writing does not keep its cache; a held cache stays with its
// appender and is found empty by the next.
func TestSeriesCachesLetGoOfQuietTenants(t *testing.T) {
	cs := newSeriesCaches()
	fill := func(c *seriesCache) {
		if c.lookup(lbls("x", "a")) == -1 {
			c.set(c.remember(c.find(labels.FromStrings("x", "a"), false)), 1, labels.FromStrings("x", "a"), lastAppended{})
		}
	}
	quiet := cs.acquire(nil, "quiet")
	fill(quiet)
	quiet.release()
	held := cs.acquire(nil, "held")
	fill(held)
	cs.PostDeletion(map[chunks.HeadSeriesRef]labels.Labels{1: labels.FromStrings("x", "a")})
	cs.mu.Lock()
	_, kept := cs.byTenant["quiet"]
	_, stays := cs.byTenant["held"]
	cs.mu.Unlock()
	if kept {
		t.Error("the cache of a tenant no appender held was kept after a removal")
	}
	if !stays {
		t.Error("a held cache was dropped")
	}
	held.release()
	for _, tenant := range []string{"quiet", "held"} {
		c := cs.acquire(nil, tenant)
		if c == nil || c == quiet || len(c.series) != 0 || c.lookup(lbls("x", "a")) != -1 {
			t.Errorf("tenant %s: the next appender got the old cache (%v) or one with %d entries", tenant, c == quiet, len(c.series))
		}
		c.release()
	}
}

// TestSeriesCacheFollowsTheSendersOrder: a series that came after another
// last time is found as its successor, without the map, wherever a request
// begins; a series in another order is found through the map, and the
// successor found must be the series looked up, not merely the next one.
func TestSeriesCacheFollowsTheSendersOrder(t *testing.T) {
	cs := newSeriesCaches()
	c := cs.acquire(nil, "t")
	defer c.release()
	names := []string{"a", "b", "c", "d"}
	add := func(name string) int {
		if i := c.lookup(lbls("x", name)); i >= 0 {
			return i
		}
		ls := labels.FromStrings("x", name)
		i := c.remember(c.find(ls, false))
		c.set(i, storage.SeriesRef(i+1), ls, lastAppended{})
		return i
	}
	at := map[string]int{}
	for _, n := range names {
		at[n] = add(n)
	}
	// Taken out of the map: b and c can now only be found as successors.
	delete(c.index, string(cacheKey(nil, lbls("x", "b"))))
	delete(c.index, string(cacheKey(nil, lbls("x", "c"))))
	if i := c.lookup(lbls("x", "a")); i != at["a"] {
		t.Fatalf("a: entry %d, want %d", i, at["a"])
	}
	for _, n := range []string{"b", "c"} {
		if i := c.lookup(lbls("x", n)); i != at[n] {
			t.Fatalf("%s after its predecessor: entry %d, want %d", n, i, at[n])
		}
	}
	// d follows c; then a, which did not follow d, comes from the map.
	if i := c.lookup(lbls("x", "d")); i != at["d"] {
		t.Fatalf("d: entry %d, want %d", i, at["d"])
	}
	if i := c.lookup(lbls("x", "a")); i != at["a"] {
		t.Fatalf("a after d: entry %d, want %d", i, at["a"])
	}
	// After a comes b, not c: c is not taken for the successor.
	if i := c.lookup(lbls("x", "c")); i != -1 {
		t.Fatalf("c after a: entry %d, want none (c is out of the map and a's successor is b)", i)
	}
}
