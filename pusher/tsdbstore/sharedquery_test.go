package tsdbstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/util/annotations"
)

// The shared TSDB of these tests holds tenants a and b with the same
// series and different values; b also has a series of its own, with a
// label name only b uses. "Region" sorts before tenantLabel, so removing
// it from that series takes a copy, the path less travelled.
var (
	sharedT0     = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
	sharedStep   = int64(30_000)
	sharedCommon = []labels.Labels{
		labels.FromStrings("__name__", "metric", "instance", "1", "job", "x"),
		labels.FromStrings("__name__", "metric", "instance", "2", "job", "x"),
		labels.FromStrings("__name__", "metric", "Region", "eu", "instance", "3", "job", "x"),
		labels.FromStrings("__name__", "other", "job", "y"),
	}
	sharedOnlyB = labels.FromStrings("__name__", "b_only", "b_label", "v", "job", "x")
)

// sharedSeriesWant is what a tenant's view shows of one series.
type sharedSeriesWant struct {
	ls     labels.Labels
	values []float64 // at sharedT0, sharedT0+sharedStep, ...
}

// sharedWant returns the tenant's series as they were written, sorted.
func sharedWant(tenant string) []sharedSeriesWant {
	scale := 1.0
	if tenant == "b" {
		scale = 10
	}
	var want []sharedSeriesWant
	for i, ls := range sharedCommon {
		v := float64(i+1) * scale
		want = append(want, sharedSeriesWant{ls, []float64{v, v + 0.5}})
	}
	if tenant == "b" {
		want = append(want, sharedSeriesWant{sharedOnlyB, []float64{100, 100.5}})
	}
	slices.SortFunc(want, func(x, y sharedSeriesWant) int { return labels.Compare(x.ls, y.ls) })
	return want
}

func withTenantLabel(ls labels.Labels, tenant string) labels.Labels {
	return labels.NewBuilder(ls).Set(tenantLabel, tenant).Labels()
}

// openSharedDB returns a real TSDB, with exemplars, holding both tenants
// as the shared mode stores them.
func openSharedDB(t testing.TB) *tsdb.DB {
	t.Helper()
	opts := tsdb.DefaultOptions()
	opts.EnableExemplarStorage = true
	opts.MaxExemplars = 100
	db, err := tsdb.Open(t.TempDir(), nil, nil, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	app := db.Appender(context.Background())
	for _, tenant := range []string{"a", "b"} {
		for i, s := range sharedWant(tenant) {
			ls := withTenantLabel(s.ls, tenant)
			var ref storage.SeriesRef
			for j, v := range s.values {
				if ref, err = app.Append(ref, ls, sharedT0+int64(j)*sharedStep, v); err != nil {
					t.Fatal(err)
				}
			}
			e := exemplar.Exemplar{
				Labels: labels.FromStrings("trace_id", fmt.Sprintf("%s-%d", tenant, i)),
				Value:  s.values[0], Ts: sharedT0, HasTs: true,
			}
			if _, err := app.AppendExemplar(ref, ls, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	return db
}

func sharedQuerierOf(t testing.TB, db *tsdb.DB, tenant string) storage.Querier {
	t.Helper()
	q, err := db.Querier(sharedT0-time.Hour.Milliseconds(), sharedT0+time.Hour.Milliseconds())
	if err != nil {
		t.Fatal(err)
	}
	tq := tenantQuerier(q, tenant)
	t.Cleanup(func() { _ = tq.Close() })
	return tq
}

// readSet returns the set's series with their values.
func readSet(t *testing.T, ss storage.SeriesSet) []sharedSeriesWant {
	t.Helper()
	var got []sharedSeriesWant
	var it chunkenc.Iterator
	for ss.Next() {
		s := ss.At()
		it = s.Iterator(it)
		var vs []float64
		for j := 0; it.Next() == chunkenc.ValFloat; j++ {
			ts, v := it.At()
			if want := sharedT0 + int64(j)*sharedStep; ts != want {
				t.Errorf("%s: sample %d at %d, want %d", s.Labels(), j, ts, want)
			}
			vs = append(vs, v)
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		got = append(got, sharedSeriesWant{s.Labels(), vs})
	}
	if err := ss.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

func sameSeries(got, want []sharedSeriesWant) bool {
	return slices.EqualFunc(got, want, func(g, w sharedSeriesWant) bool {
		return labels.Equal(g.ls, w.ls) && slices.Equal(g.values, w.values)
	})
}

func TestTenantQuerierSelectShowsOnlyTheTenantsSeriesWithoutTheTenantLabel(t *testing.T) {
	db := openSharedDB(t)
	all := labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+")
	for _, tenant := range []string{"a", "b"} {
		for _, sorted := range []bool{true, false} {
			ss := sharedQuerierOf(t, db, tenant).Select(context.Background(), sorted, nil, all)
			got := readSet(t, ss)
			if sorted && !slices.IsSortedFunc(got, func(x, y sharedSeriesWant) int { return labels.Compare(x.ls, y.ls) }) {
				t.Errorf("tenant %s: sorted select is not sorted: %v", tenant, got)
			}
			slices.SortFunc(got, func(x, y sharedSeriesWant) int { return labels.Compare(x.ls, y.ls) })
			if want := sharedWant(tenant); !sameSeries(got, want) {
				t.Errorf("tenant %s, sorted %v:\n got %v\nwant %v", tenant, sorted, got, want)
			}
		}
	}
}

// A matcher on tenantLabel is judged as if the label did not exist, and
// never widens the read beyond the tenant.
func TestTenantQuerierSelectTreatsCallerMatchersOnTheTenantLabelAsOnAnAbsentLabel(t *testing.T) {
	db := openSharedDB(t)
	metric := labels.MustNewMatcher(labels.MatchEqual, "__name__", "metric")
	aAll := sharedWant("a")
	var aMetric []sharedSeriesWant
	for _, s := range aAll {
		if s.ls.Get("__name__") == "metric" {
			aMetric = append(aMetric, s)
		}
	}
	for _, tc := range []struct {
		name string
		ms   []*labels.Matcher
		want []sharedSeriesWant
	}{
		{"another tenant's ID selects nothing", []*labels.Matcher{metric, labels.MustNewMatcher(labels.MatchEqual, tenantLabel, "b")}, nil},
		{"the tenant's own ID selects nothing, as the label is absent", []*labels.Matcher{metric, labels.MustNewMatcher(labels.MatchEqual, tenantLabel, "a")}, nil},
		{"any non-empty value selects nothing", []*labels.Matcher{metric, labels.MustNewMatcher(labels.MatchRegexp, tenantLabel, ".+")}, nil},
		{"present selects nothing", []*labels.Matcher{metric, labels.MustNewMatcher(labels.MatchNotEqual, tenantLabel, "")}, nil},
		{"alone it selects nothing", []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, tenantLabel, "a|b")}, nil},
		{"absent selects the tenant's series", []*labels.Matcher{metric, labels.MustNewMatcher(labels.MatchEqual, tenantLabel, "")}, aMetric},
		{"absent alone selects all the tenant's series", []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, tenantLabel, "")}, aAll},
		{"not another tenant selects only the tenant's series", []*labels.Matcher{metric, labels.MustNewMatcher(labels.MatchNotEqual, tenantLabel, "b")}, aMetric},
		{"not the tenant itself still selects only the tenant's series", []*labels.Matcher{labels.MustNewMatcher(labels.MatchNotRegexp, tenantLabel, "a")}, aAll},
		{"a regexp matching empty or another tenant", []*labels.Matcher{metric, labels.MustNewMatcher(labels.MatchRegexp, tenantLabel, "b|")}, aMetric},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := readSet(t, sharedQuerierOf(t, db, "a").Select(context.Background(), true, nil, tc.ms...))
			if !sameSeries(got, tc.want) {
				t.Errorf("got %v\nwant %v", got, tc.want)
			}
		})
	}
}

// sharedFakeQuerier records what reaches the querier below the view.
type sharedFakeQuerier struct {
	sorted  bool
	hints   *storage.SelectHints
	ms      []*labels.Matcher
	set     storage.SeriesSet
	closed  int
	closeEr error
	storage.Querier
}

func (f *sharedFakeQuerier) Select(_ context.Context, sorted bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	f.sorted, f.hints, f.ms = sorted, hints, ms
	return f.set
}

func (f *sharedFakeQuerier) Close() error {
	f.closed++
	return f.closeEr
}

// sharedOneSeriesSet holds one series, and warnings.
type sharedOneSeriesSet struct {
	s    storage.Series
	done bool
	ws   annotations.Annotations
}

func (s *sharedOneSeriesSet) Next() bool {
	next := !s.done
	s.done = true
	return next
}
func (s *sharedOneSeriesSet) At() storage.Series                { return s.s }
func (*sharedOneSeriesSet) Err() error                          { return nil }
func (s *sharedOneSeriesSet) Warnings() annotations.Annotations { return s.ws }

// sharedIterSeries hands out its own iterator, to show that the view's
// series iterate the samples below them.
type sharedIterSeries struct {
	ls    labels.Labels
	it    chunkenc.Iterator
	given chunkenc.Iterator
}

func (s *sharedIterSeries) Labels() labels.Labels { return s.ls }
func (s *sharedIterSeries) Iterator(it chunkenc.Iterator) chunkenc.Iterator {
	s.given = it
	return s.it
}

func TestTenantQuerierSelectPassesHintsWarningsAndErrorsThrough(t *testing.T) {
	var ws annotations.Annotations
	ws.Add(errors.New("a warning"))
	below := &sharedIterSeries{
		ls: labels.FromStrings(tenantLabel, "a", "__name__", "m"),
		it: storage.MockSeries(nil, []int64{1}, []float64{2}, []string{"__name__", "m"}).Iterator(nil),
	}
	f := &sharedFakeQuerier{set: &sharedOneSeriesSet{s: below, ws: ws}}
	hints := &storage.SelectHints{Start: 1, End: 2, Func: "rate"}
	caller := labels.MustNewMatcher(labels.MatchEqual, "__name__", "m")
	ms := []*labels.Matcher{caller}

	ss := tenantQuerier(f, "a").Select(context.Background(), true, hints, ms...)
	if !f.sorted || f.hints != hints {
		t.Errorf("sorted %v hints %v reached the querier, want true and %v", f.sorted, f.hints, hints)
	}
	want := []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, tenantLabel, "a"), caller}
	if got := fmt.Sprint(f.ms); got != fmt.Sprint(want) {
		t.Errorf("matchers %s reached the querier, want %s", got, want)
	}
	if len(ms) != 1 || ms[0] != caller {
		t.Errorf("the caller's matchers were changed: %v", ms)
	}
	if !ss.Next() {
		t.Fatal("no series")
	}
	s := ss.At()
	if got := s.Labels(); !labels.Equal(got, labels.FromStrings("__name__", "m")) {
		t.Errorf("labels %s", got)
	}
	reuse := chunkenc.NewNopIterator()
	if it := s.Iterator(reuse); it != below.it || below.given != reuse {
		t.Error("the series' iterator is not the one below")
	}
	if ss.Next() {
		t.Error("a second series")
	}
	if got := ss.Warnings(); len(got) != 1 {
		t.Errorf("warnings %v, want %v", got, ws)
	}

	boom := errors.New("boom")
	f.set = storage.ErrSeriesSet(boom)
	ss = tenantQuerier(f, "a").Select(context.Background(), false, nil)
	if ss.Next() || !errors.Is(ss.Err(), boom) {
		t.Errorf("error %v, want %v", ss.Err(), boom)
	}
}

func TestTenantQuerierClosePassesThrough(t *testing.T) {
	boom := errors.New("boom")
	f := &sharedFakeQuerier{closeEr: boom}
	if err := tenantQuerier(f, "a").Close(); !errors.Is(err, boom) || f.closed != 1 {
		t.Errorf("Close: %v, %d closes; want %v and 1", err, f.closed, boom)
	}
}

func TestTenantQuerierLabelNamesAreTheTenantsWithoutTheTenantLabel(t *testing.T) {
	db := openSharedDB(t)
	for _, tc := range []struct {
		name, tenant string
		limit        int
		ms           []*labels.Matcher
		want         []string
	}{
		{"all of a", "a", 0, nil, []string{"Region", "__name__", "instance", "job"}},
		{"all of b, with its own name", "b", 0, nil, []string{"Region", "__name__", "b_label", "instance", "job"}},
		{"matched", "a", 0, []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "other")}, []string{"__name__", "job"}},
		{"another tenant's series", "a", 0, []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "b_only")}, nil},
		{"a matcher on the tenant label", "a", 0, []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, tenantLabel, "b")}, nil},
		{"absent tenant label", "a", 0, []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, tenantLabel, "")}, []string{"Region", "__name__", "instance", "job"}},
		// tenantLabel is the TSDB's second name, after Region: a limit
		// counts the names the tenant sees.
		{"limited", "a", 2, nil, []string{"Region", "__name__"}},
		{"limited to all", "a", 4, nil, []string{"Region", "__name__", "instance", "job"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hints *storage.LabelHints
			if tc.limit > 0 {
				hints = &storage.LabelHints{Limit: tc.limit}
			}
			got, _, err := sharedQuerierOf(t, db, tc.tenant).LabelNames(context.Background(), hints, tc.ms...)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if hints != nil && hints.Limit != tc.limit {
				t.Errorf("the caller's hints were changed: limit %d", hints.Limit)
			}
		})
	}
}

func TestTenantQuerierLabelValuesAreTheTenants(t *testing.T) {
	db := openSharedDB(t)
	for _, tc := range []struct {
		tenant, label string
		ms            []*labels.Matcher
		want          []string
	}{
		{"a", "__name__", nil, []string{"metric", "other"}},
		{"b", "__name__", nil, []string{"b_only", "metric", "other"}},
		{"a", "b_label", nil, nil},
		{"b", "b_label", nil, []string{"v"}},
		{"a", "job", []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "other")}, []string{"y"}},
		{"a", tenantLabel, nil, nil},
		{"b", tenantLabel, []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+")}, nil},
		{"a", "__name__", []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, tenantLabel, "b")}, nil},
		{"a", "__name__", []*labels.Matcher{labels.MustNewMatcher(labels.MatchNotEqual, tenantLabel, "b")}, []string{"metric", "other"}},
	} {
		t.Run(fmt.Sprintf("%s %s %v", tc.tenant, tc.label, tc.ms), func(t *testing.T) {
			got, _, err := sharedQuerierOf(t, db, tc.tenant).LabelValues(context.Background(), tc.label, nil, tc.ms...)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// The view answers PromQL as the pusher's query API asks it.
func TestTenantQuerierAnswersPromQLAsTheTenantsOwnTSDB(t *testing.T) {
	db := openSharedDB(t)
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	at := time.UnixMilli(sharedT0 + sharedStep)
	for _, tc := range []struct {
		tenant, query, want string
	}{
		{"a", `sum(metric)`, `{} => 7.5`},
		{"b", `sum(metric)`, `{} => 61.5`},
		{"a", `{__name__=~".+"}`, `{Region="eu", __name__="metric", instance="3", job="x"} => 3.5` +
			`|{__name__="metric", instance="1", job="x"} => 1.5` +
			`|{__name__="metric", instance="2", job="x"} => 2.5` +
			`|{__name__="other", job="y"} => 4.5`},
		{"a", `count by (__ferry_tenant__) (metric)`, `{} => 3`},
		{"a", `{__ferry_tenant__="b"}`, ``},
		{"a", `metric{__ferry_tenant__=""}`, `{Region="eu", __name__="metric", instance="3", job="x"} => 3.5` +
			`|{__name__="metric", instance="1", job="x"} => 1.5` +
			`|{__name__="metric", instance="2", job="x"} => 2.5`},
		{"a", `b_only`, ``},
		{"b", `b_only`, `{__name__="b_only", b_label="v", job="x"} => 100.5`},
	} {
		t.Run(tc.tenant+" "+tc.query, func(t *testing.T) {
			queryable := storage.QueryableFunc(func(mint, maxt int64) (storage.Querier, error) {
				q, err := db.Querier(mint, maxt)
				if err != nil {
					return nil, err
				}
				return tenantQuerier(q, tc.tenant), nil
			})
			qry, err := engine.NewInstantQuery(context.Background(), queryable, nil, tc.query, at)
			if err != nil {
				t.Fatal(err)
			}
			defer qry.Close()
			res := qry.Exec(context.Background())
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			vec, err := res.Vector()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range vec {
				got = append(got, fmt.Sprintf("%s => %v", s.Metric, s.F))
			}
			slices.Sort(got)
			if g := strings.Join(got, "|"); g != tc.want {
				t.Errorf("got  %s\nwant %s", g, tc.want)
			}
		})
	}
}

func TestTenantExemplarQuerierShowsOnlyTheTenantsExemplars(t *testing.T) {
	db := openSharedDB(t)
	name := func(n string) []*labels.Matcher {
		return []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", n)}
	}
	for _, tc := range []struct {
		name, tenant string
		sets         [][]*labels.Matcher
		want         string
	}{
		{"all of a", "a", [][]*labels.Matcher{name("metric"), name("other")},
			`{Region="eu", __name__="metric", instance="3", job="x"}: {trace_id="a-0"} 3` +
				`|{__name__="metric", instance="1", job="x"}: {trace_id="a-1"} 1` +
				`|{__name__="metric", instance="2", job="x"}: {trace_id="a-2"} 2` +
				`|{__name__="other", job="y"}: {trace_id="a-3"} 4`},
		// b_only is b's alone: every set is restricted, not just the first.
		{"every set restricted", "a", [][]*labels.Matcher{name("other"), name("b_only")},
			`{__name__="other", job="y"}: {trace_id="a-3"} 4`},
		{"b's own series", "b", [][]*labels.Matcher{name("b_only")},
			`{__name__="b_only", b_label="v", job="x"}: {trace_id="b-1"} 100`},
		{"an empty set is all of the tenant's", "a", [][]*labels.Matcher{{}},
			`{Region="eu", __name__="metric", instance="3", job="x"}: {trace_id="a-0"} 3` +
				`|{__name__="metric", instance="1", job="x"}: {trace_id="a-1"} 1` +
				`|{__name__="metric", instance="2", job="x"}: {trace_id="a-2"} 2` +
				`|{__name__="other", job="y"}: {trace_id="a-3"} 4`},
		{"a matcher on the tenant label", "a", [][]*labels.Matcher{{labels.MustNewMatcher(labels.MatchRegexp, tenantLabel, ".+")}}, ``},
		{"a set ruled out, another not", "a", [][]*labels.Matcher{
			{labels.MustNewMatcher(labels.MatchEqual, tenantLabel, "b")},
			append(name("other"), labels.MustNewMatcher(labels.MatchNotEqual, tenantLabel, "b")),
		}, `{__name__="other", job="y"}: {trace_id="a-3"} 4`},
		{"no sets", "a", nil, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eq, err := db.ExemplarQuerier(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			res, err := tenantExemplarQuerier(eq, tc.tenant).Select(sharedT0-1, sharedT0+1, tc.sets...)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.IsSortedFunc(res, func(x, y exemplar.QueryResult) int { return labels.Compare(x.SeriesLabels, y.SeriesLabels) }) {
				t.Errorf("results not sorted by series: %v", res)
			}
			var got []string
			for _, r := range res {
				for _, e := range r.Exemplars {
					got = append(got, fmt.Sprintf("%s: %s %v", r.SeriesLabels, e.Labels, e.Value))
				}
			}
			if g := strings.Join(got, "|"); g != tc.want {
				t.Errorf("got  %s\nwant %s", g, tc.want)
			}
		})
	}
}

type sharedFakeExemplarQuerier struct{ calls int }

func (f *sharedFakeExemplarQuerier) Select(int64, int64, ...[]*labels.Matcher) ([]exemplar.QueryResult, error) {
	f.calls++
	return []exemplar.QueryResult{{SeriesLabels: labels.FromStrings("__name__", "m", tenantLabel, "b")}}, nil
}

// No matcher sets select nothing, whatever the storage below would answer;
// a storage error reaches the caller.
func TestTenantExemplarQuerierWithoutMatcherSetsSelectsNothing(t *testing.T) {
	f := &sharedFakeExemplarQuerier{}
	res, err := tenantExemplarQuerier(f, "a").Select(0, 1)
	if err != nil || res != nil || f.calls != 0 {
		t.Errorf("got %v, %v after %d calls below; want nothing and no call", res, err, f.calls)
	}
}

type sharedFailingExemplarQuerier struct{ err error }

func (f sharedFailingExemplarQuerier) Select(int64, int64, ...[]*labels.Matcher) ([]exemplar.QueryResult, error) {
	return nil, f.err
}

func TestTenantExemplarQuerierPassesErrorsThrough(t *testing.T) {
	boom := errors.New("boom")
	_, err := tenantExemplarQuerier(sharedFailingExemplarQuerier{boom}, "a").Select(0, 1, nil)
	if !errors.Is(err, boom) {
		t.Errorf("error %v, want %v", err, boom)
	}
}

// The view adds no allocation per series when tenantLabel is the series'
// first label, one when a name sorting before it (here "A") makes it copy
// the labels, and a few per Select for its set and its blocks of series.
func TestTenantQuerierSelectCostsAtMostOneAllocationPerSeries(t *testing.T) {
	const perKind = 100 // series with tenantLabel first, and as many without
	db, err := tsdb.Open(t.TempDir(), nil, nil, tsdb.DefaultOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	app := db.Appender(context.Background())
	for _, tenant := range []string{"t", "u"} {
		for i := range perKind {
			for _, ls := range []labels.Labels{
				labels.FromStrings("__name__", "m", tenantLabel, tenant, "i", fmt.Sprint(i)),
				labels.FromStrings("A", "x", "__name__", "m", tenantLabel, tenant, "i", fmt.Sprint(i)),
			} {
				if _, err := app.Append(0, ls, sharedT0, 1); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	q, err := db.Querier(sharedT0-1, sharedT0+1)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	m := labels.MustNewMatcher(labels.MatchEqual, "__name__", "m")
	read := func(q storage.Querier, ms ...*labels.Matcher) float64 {
		return testing.AllocsPerRun(20, func() {
			ss := q.Select(context.Background(), true, nil, ms...)
			n := 0
			for ss.Next() {
				_ = ss.At().Labels()
				n++
			}
			if n != 2*perKind {
				t.Fatalf("%d series, want %d", n, 2*perKind)
			}
		})
	}
	raw := read(q, m, labels.MustNewMatcher(labels.MatchEqual, tenantLabel, "t"))
	view := read(tenantQuerier(q, "t"), m)
	// One copy per series with "A", and a small constant: the set, the
	// matchers and the blocks of at most 255 series.
	if limit := float64(perKind + 10); view-raw > limit {
		t.Errorf("the view makes %.0f allocations more than a plain read of %d series, want at most %.0f", view-raw, 2*perKind, limit)
	}
}

// BenchmarkTenantQuerierSelect reads all series of one tenant of ten from
// a shared TSDB: "raw" selects them with the tenant matcher alone, "view"
// through tenantQuerier; the difference is the view's cost.
func BenchmarkTenantQuerierSelect(b *testing.B) {
	const tenants, series = 10, 1000
	opts := tsdb.DefaultOptions()
	db, err := tsdb.Open(b.TempDir(), nil, nil, opts, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	app := db.Appender(context.Background())
	for tn := range tenants {
		for i := range series {
			ls := labels.FromStrings("__name__", "metric", tenantLabel, fmt.Sprint("t", tn), "instance", fmt.Sprint(i), "job", "bench")
			if _, err := app.Append(0, ls, sharedT0, float64(i)); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := app.Commit(); err != nil {
		b.Fatal(err)
	}
	q, err := db.Querier(sharedT0-1, sharedT0+1)
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	metric := labels.MustNewMatcher(labels.MatchEqual, "__name__", "metric")
	read := func(b *testing.B, q storage.Querier, ms ...*labels.Matcher) {
		b.ReportAllocs()
		var it chunkenc.Iterator
		n := 0
		for b.Loop() {
			ss := q.Select(context.Background(), true, nil, ms...)
			for ss.Next() {
				s := ss.At()
				if s.Labels().Len() == 0 {
					b.Fatal("no labels")
				}
				it = s.Iterator(it)
				for it.Next() != chunkenc.ValNone {
				}
				n++
			}
			if err := ss.Err(); err != nil {
				b.Fatal(err)
			}
		}
		if n != b.N*series {
			b.Fatalf("%d series in %d reads, want %d each", n, b.N, series)
		}
	}
	b.Run("raw", func(b *testing.B) {
		read(b, q, metric, labels.MustNewMatcher(labels.MatchEqual, tenantLabel, "t3"))
	})
	b.Run("view", func(b *testing.B) {
		read(b, tenantQuerier(q, "t3"), metric)
	})
}
