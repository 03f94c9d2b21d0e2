package tsdbstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// base is a timestamp an hour ago: recent enough for the creation grace
// period and retention, old enough to leave room for later samples.
var base = time.Now().Add(-time.Hour).Truncate(time.Minute).UnixMilli()

func newTestStore(t testing.TB, modify func(*Config)) *Store {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Tenancy = testTenancy
	cfg.Path = t.TempDir()
	cfg.IdleTimeout = 0
	cfg.MaxExemplars = 100_000 // most tests store exemplars
	if modify != nil {
		modify(&cfg)
	}
	s, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

func lbls(kv ...string) []prompb.Label {
	out := make([]prompb.Label, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, prompb.Label{Name: kv[i], Value: kv[i+1]})
	}
	return out
}

func floats(ls []prompb.Label, tv ...float64) prompb.TimeSeries {
	ts := prompb.TimeSeries{Labels: ls}
	for i := 0; i+1 < len(tv); i += 2 {
		ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: int64(tv[i]), Value: tv[i+1]})
	}
	return ts
}

// intHist is a valid integer histogram whose content depends on n.
func intHist(t int64, n uint64) prompb.Histogram {
	return prompb.Histogram{
		Count: &prompb.Histogram_CountInt{CountInt: 2*n + 1}, Sum: float64(n) * 1.5, Schema: 1, ZeroThreshold: 0.001,
		ZeroCount:     &prompb.Histogram_ZeroCountInt{ZeroCountInt: 1},
		PositiveSpans: []prompb.BucketSpan{{Offset: 0, Length: 2}}, PositiveDeltas: []int64{int64(n), 0},
		Timestamp: t,
	}
}

// floatHist is a valid float histogram whose content depends on x.
func floatHist(t int64, x float64) prompb.Histogram {
	return prompb.Histogram{
		Count: &prompb.Histogram_CountFloat{CountFloat: 2*x + 0.5}, Sum: x, Schema: 0,
		ZeroCount:     &prompb.Histogram_ZeroCountFloat{ZeroCountFloat: 0.5},
		NegativeSpans: []prompb.BucketSpan{{Offset: 1, Length: 2}}, NegativeCounts: []float64{x, x},
		ResetHint: prompb.Histogram_RESET_HINT_GAUGE, Timestamp: t,
	}
}

// nhcb is a valid integer histogram with custom buckets.
func nhcb(t int64, n int64) prompb.Histogram {
	return prompb.Histogram{
		Count: &prompb.Histogram_CountInt{CountInt: uint64(3*n + 1)}, Sum: float64(n), Schema: histogram.CustomBucketsSchema,
		PositiveSpans: []prompb.BucketSpan{{Offset: 0, Length: 3}}, PositiveDeltas: []int64{n, 1, -1},
		CustomValues: []float64{0.1, 1, 10}, Timestamp: t,
	}
}

func ex(t int64, v float64, trace string) prompb.Exemplar {
	return prompb.Exemplar{Labels: lbls("trace_id", trace), Value: v, Timestamp: t}
}

func toLabels(ls []prompb.Label) labels.Labels {
	b := labels.NewScratchBuilder(len(ls))
	for _, l := range ls {
		b.Add(l.Name, l.Value)
	}
	b.Sort()
	return b.Labels()
}

// stored is what a query returns for one series.
type stored struct {
	t  int64
	v  float64
	h  *histogram.Histogram
	fh *histogram.FloatHistogram
}

// String makes stored data comparable through fmt.Sprint.
func (s stored) String() string {
	switch {
	case s.h != nil:
		return fmt.Sprintf("%d:%s", s.t, s.h)
	case s.fh != nil:
		return fmt.Sprintf("%d:%s", s.t, s.fh)
	default:
		return fmt.Sprintf("%d:%x", s.t, math.Float64bits(s.v))
	}
}

// queryAll returns every sample of the tenant by series.
func queryAll(t *testing.T, s *Store, tenant string) map[string][]stored {
	t.Helper()
	q, err := s.Queryable(tenant).Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	return selectAll(t, q)
}

func selectAll(t *testing.T, q storage.Querier) map[string][]stored {
	t.Helper()
	out := map[string][]stored{}
	ss := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"))
	for ss.Next() {
		series := ss.At()
		it := series.Iterator(nil)
		var samples []stored
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			switch vt {
			case chunkenc.ValFloat:
				ts, v := it.At()
				samples = append(samples, stored{t: ts, v: v})
			case chunkenc.ValHistogram:
				ts, h := it.AtHistogram(nil)
				samples = append(samples, stored{t: ts, h: h})
			case chunkenc.ValFloatHistogram:
				ts, fh := it.AtFloatHistogram(nil)
				samples = append(samples, stored{t: ts, fh: fh})
			}
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		out[series.Labels().String()] = samples
	}
	if err := ss.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// floatsOf returns the timestamp/value pairs of float samples.
func floatsOf(samples []stored) []float64 {
	var out []float64
	for _, s := range samples {
		out = append(out, float64(s.t), s.v)
	}
	return out
}

func mustPush(t *testing.T, s *Store, tenant string, req *prompb.WriteRequest) backend.Result {
	t.Helper()
	res, err := s.Push(context.Background(), tenant, req)
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	if want := backend.Count(req); res.Accepted != want || res.Rejected != 0 {
		t.Fatalf("push result %+v, want %d accepted", res, want)
	}
	return res
}

// clientError asserts that err is a client error and returns it.
func clientError(t *testing.T, err error) *backend.ClientError {
	t.Helper()
	var ce *backend.ClientError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T) is not a ClientError", err, err)
	}
	if status, _ := backend.Classify(err); status != ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR {
		t.Fatalf("backend.Classify(%v) = %v", err, status)
	}
	return ce
}

func TestPushAndQueryRoundTrip(t *testing.T) {
	s := newTestStore(t, nil)
	b := float64(base)
	stale := math.Float64frombits(0x7ff0000000000002) // Prometheus' stale marker
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		floats(lbls("__name__", "up", "job", "a"), b, 1, b+1000, 0, b+2000, stale),
		floats(lbls("job", "b", "__name__", "up"), b, 0.1, b+1000, math.Inf(-1)), // unsorted labels
		{
			Labels:     lbls("__name__", "requests_total"),
			Samples:    []prompb.Sample{{Timestamp: base, Value: 10}, {Timestamp: base + 1000, Value: 12}},
			Exemplars:  []prompb.Exemplar{ex(base+1000, 1.5, "t2"), ex(base, 0.5, "t1")}, // unsorted
			Histograms: nil,
		},
		{Labels: lbls("__name__", "latency"), Histograms: []prompb.Histogram{intHist(base, 1), intHist(base+1000, 3)}},
		{Labels: lbls("__name__", "gauge_hist"), Histograms: []prompb.Histogram{floatHist(base, 1.25), floatHist(base+1000, 0.5)}},
		{Labels: lbls("__name__", "nhcb"), Histograms: []prompb.Histogram{nhcb(base, 1), nhcb(base+1000, 2)}},
	}}
	mustPush(t, s, "t1", req)

	got := queryAll(t, s, "t1")
	if len(got) != len(req.Timeseries) {
		t.Fatalf("got %d series, want %d: %v", len(got), len(req.Timeseries), got)
	}
	for _, ts := range req.Timeseries {
		key := toLabels(ts.Labels).String()
		samples := got[key]
		if len(ts.Samples) > 0 {
			want := floatsOf(nil)
			for _, smp := range ts.Samples {
				want = append(want, float64(smp.Timestamp), smp.Value)
			}
			gotF := floatsOf(samples)
			if len(gotF) != len(want) {
				t.Fatalf("%s: got %v, want %v", key, gotF, want)
			}
			for i := range want {
				if math.Float64bits(gotF[i]) != math.Float64bits(want[i]) {
					t.Fatalf("%s: got %v, want %v (bitwise)", key, gotF, want)
				}
			}
		}
		for i, ph := range ts.Histograms {
			wantH, wantFH, err := convertHistogram(&ph)
			if err != nil {
				t.Fatal(err)
			}
			g := samples[i]
			if g.t != ph.Timestamp {
				t.Fatalf("%s: sample %d at %d, want %d", key, i, g.t, ph.Timestamp)
			}
			if wantH != nil && (g.h == nil || !g.h.Equals(wantH)) {
				t.Fatalf("%s: got %v, want %v", key, g.h, wantH)
			}
			if wantFH != nil && (g.fh == nil || !g.fh.Equals(wantFH)) {
				t.Fatalf("%s: got %v, want %v", key, g.fh, wantFH)
			}
		}
	}

	eq, err := s.ExemplarQueryable("t1").ExemplarQuerier(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	res, err := eq.Select(base-1, base+5000, []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "requests_total")})
	if err != nil {
		t.Fatal(err)
	}
	want := []exemplar.Exemplar{
		{Labels: labels.FromStrings("trace_id", "t1"), Value: 0.5, Ts: base, HasTs: true},
		{Labels: labels.FromStrings("trace_id", "t2"), Value: 1.5, Ts: base + 1000, HasTs: true},
	}
	if len(res) != 1 || !slices.EqualFunc(res[0].Exemplars, want, exemplar.Exemplar.Equals) {
		t.Fatalf("exemplars %v, want %v", res, want)
	}
}

func TestPushOutOfOrderMix(t *testing.T) {
	s := newTestStore(t, nil)
	b := float64(base)
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		floats(lbls("__name__", "x", "a", "b"), b+10_000, 1),
		{Labels: lbls("__name__", "h"), Histograms: []prompb.Histogram{intHist(base+10_000, 1)}},
	}})

	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		floats(lbls("__name__", "good"), b, 1, b+1000, 2),
		floats(lbls("__name__", "x", "a", "b"), b+5000, 7, b+20_000, 2), // first one out of order
		{Labels: lbls("__name__", "h"), Histograms: []prompb.Histogram{intHist(base+1000, 5), intHist(base+30_000, 2)}},
	}}
	res, err := s.Push(context.Background(), "t", req)
	if res != (backend.Result{Accepted: 4, Rejected: 2}) {
		t.Fatalf("result %+v, want 4 accepted, 2 rejected", res)
	}
	ce := clientError(t, err)
	wantPrefix := `out-of-order sample for series {__name__="x", a="b"} (first error: `
	if !strings.HasPrefix(ce.Reason, wantPrefix) {
		t.Fatalf("reason %q, want prefix %q", ce.Reason, wantPrefix)
	}
	if !errors.Is(err, storage.ErrOutOfOrderSample) {
		t.Fatalf("error %v does not wrap ErrOutOfOrderSample", err)
	}

	got := queryAll(t, s, "t")
	if g := floatsOf(got[`{__name__="good"}`]); !slices.Equal(g, []float64{b, 1, b + 1000, 2}) {
		t.Errorf("good series: %v", g)
	}
	if g := floatsOf(got[`{__name__="x", a="b"}`]); !slices.Equal(g, []float64{b + 10_000, 1, b + 20_000, 2}) {
		t.Errorf("series x: %v", g)
	}
	if h := got[`{__name__="h"}`]; len(h) != 2 || h[1].t != base+30_000 {
		t.Errorf("histogram series: %v", h)
	}
}

func TestPushOutOfOrderWindow(t *testing.T) {
	s := newTestStore(t, func(c *Config) { c.OutOfOrderWindow = 10 * time.Minute })
	b := float64(base)
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), b+20*60_000, 1)}})
	res, err := s.Push(context.Background(), "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		floats(lbls("__name__", "x"), b+15*60_000, 2, b, 3), // within, then beyond the window
	}})
	if res != (backend.Result{Accepted: 1, Rejected: 1}) || !errors.Is(err, storage.ErrTooOldSample) {
		t.Fatalf("result %+v, error %v; want 1 accepted, 1 too old", res, err)
	}
	clientError(t, err)
	if g := floatsOf(queryAll(t, s, "t")[`{__name__="x"}`]); !slices.Equal(g, []float64{b + 15*60_000, 2, b + 20*60_000, 1}) {
		t.Fatalf("stored %v", g)
	}
}

func TestPushDuplicateDifferentValue(t *testing.T) {
	s := newTestStore(t, nil)
	b := float64(base)
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), b, 1)}})

	res, err := s.Push(context.Background(), "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), b, 2)}})
	if res != (backend.Result{Rejected: 1}) || !errors.Is(err, storage.ErrDuplicateSampleForTimestamp) {
		t.Fatalf("result %+v, error %v", res, err)
	}
	if ce := clientError(t, err); !strings.HasPrefix(ce.Reason, `duplicate sample for timestamp with a different value for series {__name__="x"} (first error:`) {
		t.Fatalf("reason %q", ce.Reason)
	}

	// Within one request: the TSDB would drop the second silently at
	// commit; the store reports it.
	res, err = s.Push(context.Background(), "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		floats(lbls("__name__", "y"), b, 1, b, 2, b, 1),
	}})
	if res != (backend.Result{Accepted: 2, Rejected: 1}) || !errors.Is(err, storage.ErrDuplicateSampleForTimestamp) {
		t.Fatalf("in-request duplicate: result %+v, error %v", res, err)
	}
	got := queryAll(t, s, "t")
	if g := floatsOf(got[`{__name__="x"}`]); !slices.Equal(g, []float64{b, 1}) {
		t.Errorf("x: %v", g)
	}
	if g := floatsOf(got[`{__name__="y"}`]); !slices.Equal(g, []float64{b, 1}) {
		t.Errorf("y: %v", g)
	}
}

func TestPushSortsSamplesOfASeries(t *testing.T) {
	s := newTestStore(t, nil)
	b := float64(base)
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), b+2000, 3, b, 1, b+1000, 2)}}
	orig := slices.Clone(req.Timeseries[0].Samples)
	mustPush(t, s, "t", req)
	if g := floatsOf(queryAll(t, s, "t")[`{__name__="x"}`]); !slices.Equal(g, []float64{b, 1, b + 1000, 2, b + 2000, 3}) {
		t.Fatalf("stored %v", g)
	}
	if !slices.Equal(req.Timeseries[0].Samples, orig) {
		t.Fatal("Push reordered the caller's request")
	}
}

// replayRequest has several samples, histograms and exemplars per series, so
// that a replay sends the TSDB samples older than the newest stored ones.
func replayRequest(offset int64) *prompb.WriteRequest {
	b := base + offset
	req := &prompb.WriteRequest{}
	for i := range 3 {
		ts := prompb.TimeSeries{Labels: lbls("__name__", "replay", "i", fmt.Sprint(i))}
		for j := range 5 {
			ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: b + int64(j)*1000, Value: float64(i*10 + j)})
		}
		ts.Exemplars = []prompb.Exemplar{ex(b+1000, 1, "a"), ex(b+3000, 3, "b")}
		req.Timeseries = append(req.Timeseries, ts)
	}
	req.Timeseries = append(req.Timeseries,
		prompb.TimeSeries{Labels: lbls("__name__", "replay_h"), Histograms: []prompb.Histogram{intHist(b, 1), intHist(b+1000, 2), intHist(b+2000, 2)}},
		prompb.TimeSeries{Labels: lbls("__name__", "replay_fh"), Histograms: []prompb.Histogram{floatHist(b, 1), floatHist(b+1000, 2)}},
		prompb.TimeSeries{Labels: lbls("__name__", "replay_nhcb"), Histograms: []prompb.Histogram{nhcb(b, 1), nhcb(b+1000, 2)}},
	)
	return req
}

func TestPushIdenticalReplay(t *testing.T) {
	s := newTestStore(t, nil)
	req := replayRequest(0)
	mustPush(t, s, "t", req)
	before := queryAll(t, s, "t")

	// The whole request again, as after a retry or a crash before the
	// Kafka commit.
	mustPush(t, s, "t", req)
	// An older part of it again.
	part := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		{Labels: req.Timeseries[0].Labels, Samples: req.Timeseries[0].Samples[1:3], Exemplars: req.Timeseries[0].Exemplars[:1]},
		{Labels: req.Timeseries[3].Labels, Histograms: req.Timeseries[3].Histograms[:1]},
	}}
	mustPush(t, s, "t", part)

	if after := queryAll(t, s, "t"); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("replays changed the data:\nbefore %v\nafter  %v", before, after)
	}

	// A "replay" with another value is not one.
	changed := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		{Labels: req.Timeseries[0].Labels, Samples: []prompb.Sample{{Timestamp: base, Value: 1e6}, {Timestamp: base + 1000, Value: 1}}},
		{Labels: req.Timeseries[3].Labels, Histograms: []prompb.Histogram{intHist(base, 7)}},
		{Labels: req.Timeseries[1].Labels, Exemplars: []prompb.Exemplar{ex(base+1000, 99, "a")}},
	}}
	res, err := s.Push(context.Background(), "t", changed)
	if res != (backend.Result{Accepted: 1, Rejected: 3}) || !errors.Is(err, storage.ErrOutOfOrderSample) {
		t.Fatalf("changed replay: result %+v, error %v", res, err)
	}
	clientError(t, err)
}

func TestSeriesLimit(t *testing.T) {
	s := newTestStore(t, func(c *Config) { c.MaxSeriesPerTenant = 3 })
	b := float64(base)
	req := &prompb.WriteRequest{}
	for i := range 5 {
		ts := floats(lbls("__name__", "s", "i", fmt.Sprint(i)), b, 1, b+1000, 2)
		ts.Exemplars = []prompb.Exemplar{ex(base, 1, "x")}
		req.Timeseries = append(req.Timeseries, ts)
	}
	res, err := s.Push(context.Background(), "t", req)
	if res != (backend.Result{Accepted: 9, Rejected: 6}) || !errors.Is(err, errSeriesLimit) {
		t.Fatalf("result %+v, error %v; want 9 accepted, 6 rejected", res, err)
	}
	ce := clientError(t, err)
	for _, want := range []string{`{__name__="s", i="3"}`, "limit is 3", "-limits.max-series-per-tenant"} {
		if !strings.Contains(ce.Reason, want) {
			t.Errorf("reason %q does not contain %q", ce.Reason, want)
		}
	}

	// Existing series keep working, new ones stay refused.
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "s", "i", "0"), b+2000, 3)}})
	res, err = s.Push(context.Background(), "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		floats(lbls("__name__", "s", "i", "1"), b+2000, 3),
		floats(lbls("__name__", "new"), b+2000, 3),
	}})
	if res != (backend.Result{Accepted: 1, Rejected: 1}) || !errors.Is(err, errSeriesLimit) {
		t.Fatalf("result %+v, error %v", res, err)
	}
	if n := len(queryAll(t, s, "t")); n != 3 {
		t.Fatalf("%d series stored, want 3", n)
	}
	// Another tenant has its own limit.
	mustPush(t, s, "other", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "new"), b, 1)}})
}

func TestSeriesLimitConcurrent(t *testing.T) {
	const limit = 50
	s := newTestStore(t, func(c *Config) { c.MaxSeriesPerTenant = limit })
	var wg sync.WaitGroup
	var mu sync.Mutex
	var accepted int64
	for w := range 4 {
		wg.Go(func() {
			for i := range 40 {
				req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "c", "w", fmt.Sprint(w), "i", fmt.Sprint(i)), float64(base), 1)}}
				res, err := s.Push(context.Background(), "t", req)
				if err != nil && !errors.Is(err, errSeriesLimit) {
					t.Error(err)
				}
				mu.Lock()
				accepted += res.Accepted
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if accepted != limit {
		t.Fatalf("%d series accepted, want exactly the limit %d", accepted, limit)
	}
}

func TestTenantIsolation(t *testing.T) {
	s := newTestStore(t, nil)
	b := float64(base)
	mustPush(t, s, "a", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "only_a"), b, 1)}})
	mustPush(t, s, "b", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "only_b"), b, 2)}})
	ga, gb := queryAll(t, s, "a"), queryAll(t, s, "b")
	if _, ok := ga[`{__name__="only_a"}`]; !ok || len(ga) != 1 {
		t.Errorf("tenant a sees %v", ga)
	}
	if _, ok := gb[`{__name__="only_b"}`]; !ok || len(gb) != 1 {
		t.Errorf("tenant b sees %v", gb)
	}
	// The same series in two tenants does not conflict.
	mustPush(t, s, "a", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "shared"), b, 1)}})
	mustPush(t, s, "b", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "shared"), b, 2)}})
	if got := s.Tenants(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("tenants %v", got)
	}
}

func TestQueryUnknownTenantCreatesNothing(t *testing.T) {
	s := newTestStore(t, nil)
	for _, tenant := range []string{"nobody", "..", ""} {
		q, err := s.Queryable(tenant).Querier(math.MinInt64, math.MaxInt64)
		if err != nil {
			t.Fatal(err)
		}
		if got := selectAll(t, q); len(got) != 0 {
			t.Errorf("%q: got %v", tenant, got)
		}
		_ = q.Close()
		res, err := s.ExemplarQueryable(tenant).ExemplarQuerier(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if r, err := res.Select(0, math.MaxInt64, []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+")}); err != nil || len(r) != 0 {
			t.Errorf("%q exemplars: %v, %v", tenant, r, err)
		}
	}
	entries, err := os.ReadDir(s.cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	if entries = withoutLockFile(entries); len(entries) != 0 {
		t.Fatalf("reads created %v", entries)
	}
	if got := s.Tenants(); len(got) != 0 {
		t.Fatalf("tenants %v", got)
	}
	// A metadata-only push does not create a TSDB either.
	if _, err := s.Push(context.Background(), "meta-only", &prompb.WriteRequest{Metadata: []prompb.MetricMetadata{{MetricFamilyName: "x"}}}); err != nil {
		t.Fatal(err)
	}
	if got := s.Tenants(); len(got) != 0 {
		t.Fatalf("tenants after a metadata-only push: %v", got)
	}
}

func TestReopenFromDisk(t *testing.T) {
	dir := t.TempDir()
	b := float64(base)
	s := newTestStore(t, func(c *Config) { c.Path = dir })
	mustPush(t, s, "a", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), b, 1)}})
	mustPush(t, s, "b", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "y"), b, 2)}})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Garbage in the directory is not a tenant.
	if err := os.Mkdir(filepath.Join(dir, "lost+found"), 0o755); err != nil {
		t.Fatal(err)
	}

	s2 := newTestStore(t, func(c *Config) { c.Path = dir })
	if got := s2.Tenants(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("tenants %v", got)
	}
	// A read opens the tenant from disk.
	if g := floatsOf(queryAll(t, s2, "a")[`{__name__="x"}`]); !slices.Equal(g, []float64{b, 1}) {
		t.Fatalf("a after reopen: %v", g)
	}
}

func TestIdleCloseAndReopen(t *testing.T) {
	const idle = 50 * time.Millisecond
	s := newTestStore(t, func(c *Config) { c.IdleTimeout = idle })
	b := float64(base)
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), b, 1)}})
	waitOpen(t, s, 0)

	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), b+1000, 2)}})
	if g := floatsOf(queryAll(t, s, "t")[`{__name__="x"}`]); !slices.Equal(g, []float64{b, 1, b + 1000, 2}) {
		t.Fatalf("after reopen: %v", g)
	}
	waitOpen(t, s, 0)

	// An open Querier keeps the tenant open past the idle timeout.
	q, err := s.Queryable("t").Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * idle)
	if n := len(s.openTenantStats()); n != 1 {
		t.Fatalf("%d tenants open while a Querier is, want 1", n)
	}
	if g := floatsOf(selectAll(t, q)[`{__name__="x"}`]); len(g) != 4 {
		t.Fatalf("querier read %v", g)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	waitOpen(t, s, 0)
}

// waitOpen waits until n tenants are open.
func waitOpen(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(s.openTenantStats()) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d tenants open, want %d", len(s.openTenantStats()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSyncDurability(t *testing.T) {
	s := newTestStore(t, func(c *Config) { c.OutOfOrderWindow = time.Hour })
	if n, err := s.Sync(context.Background()); n != 0 || err != nil {
		t.Fatalf("sync without tenants: %d, %v", n, err)
	}
	req := replayRequest(0)
	mustPush(t, s, "t", req)
	// An out-of-order sample goes to the WBL, which Sync covers too.
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "ooo"), float64(base+60_000), 1)}})
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "ooo"), float64(base), 2)}})
	mustPush(t, s, "u", replayRequest(0))
	want := queryAll(t, s, "t")

	wantSynced := 2 // TSDBs: one per tenant, or the shared one
	if s.cfg.shared() {
		wantSynced = 1
	}
	n, err := s.Sync(context.Background())
	if err != nil || n != wantSynced {
		t.Fatalf("sync: %d TSDBs, %v; want %d", n, err, wantSynced)
	}
	// Simulate a crash: copy the directory while the TSDB is open and was
	// never closed, then open the copy as a restarted process would.
	crashed := t.TempDir()
	copyDir(t, filepath.Join(s.cfg.Path, testDB("t")), crashed)
	q, closeRaw := openRaw(t, crashed)
	defer closeRaw()
	if s.cfg.shared() {
		q = tenantQuerier(q, "t")
	}
	if got := selectAll(t, q); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the crash:\n got %v\nwant %v", got, want)
	}

	// Later segments are synced by later calls.
	s.tenants.mu.Lock()
	tdb := s.tenants.byID[s.cfg.dbID("t")]
	s.tenants.mu.Unlock()
	if from, ok := tdb.syncedFrom["wal"]; !ok || from < 0 {
		t.Fatalf("WAL sync position %v", tdb.syncedFrom)
	}
	if _, ok := tdb.syncedFrom["wbl"]; !ok {
		t.Fatalf("the WBL was not synced: %v", tdb.syncedFrom)
	}
}

// openRaw opens the TSDB at dir directly, as a restarted process would,
// and returns a Querier over all of its data and the function that closes
// both.
func openRaw(t *testing.T, dir string) (storage.Querier, func()) {
	t.Helper()
	db, err := tsdb.Open(dir, nil, nil, tsdb.DefaultOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	q, err := db.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		_ = db.Close()
		t.Fatal(err)
	}
	return q, func() {
		if err := errors.Join(q.Close(), db.Close()); err != nil {
			t.Error(err)
		}
	}
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestClosedStore(t *testing.T) {
	s := newTestStore(t, nil)
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), float64(base), 1)}})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), float64(base+1000), 2)}}
	_, err := s.Push(context.Background(), "t", req)
	if status, retryAfter := backend.Classify(err); status != ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR || retryAfter <= 0 {
		t.Fatalf("push after close: %v classified %v, retry after %v", err, status, retryAfter)
	}
	if _, err := s.Sync(context.Background()); err == nil {
		t.Fatal("sync after close succeeded")
	} else if status, _ := backend.Classify(err); status != ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR {
		t.Fatalf("sync after close: %v classified %v", err, status)
	}
	if _, err := s.Queryable("t").Querier(0, math.MaxInt64); err == nil {
		t.Fatal("querier after close succeeded")
	}
}

func TestCanceledContext(t *testing.T) {
	s := newTestStore(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), float64(base), 1)}}
	res, err := s.Push(ctx, "t", req)
	if status, _ := backend.Classify(err); status != ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR || !errors.Is(err, context.Canceled) {
		t.Fatalf("push with a canceled context: %+v, %v", res, err)
	}
	if _, err := s.Sync(ctx); err != nil {
		// No tenant is open, so there is nothing to cancel.
		t.Fatalf("sync: %v", err)
	}
}

func TestInvalidTenants(t *testing.T) {
	s := newTestStore(t, nil)
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), float64(base), 1, float64(base+1), 2)}}
	for _, tenant := range []string{"", ".", "..", "a/b", "../x", `a\b`, "a\x00b", "\xff\xfe", strings.Repeat("x", maxTenantLen+1)} {
		res, err := s.Push(context.Background(), tenant, req)
		if res != (backend.Result{Rejected: 2}) {
			t.Errorf("%q: result %+v, want 2 rejected", tenant, res)
		}
		if ce := clientError(t, err); !strings.Contains(ce.Reason, "invalid tenant ID") {
			t.Errorf("%q: reason %q", tenant, ce.Reason)
		}
	}
	if entries, _ := os.ReadDir(s.cfg.Path); len(withoutLockFile(entries)) != 0 {
		t.Fatalf("invalid tenants created %v", entries)
	}
	if entries, _ := os.ReadDir(filepath.Dir(s.cfg.Path)); len(entries) != 1 {
		t.Fatalf("an invalid tenant escaped the store directory: %v", entries)
	}
	for _, tenant := range []string{"a.b", "tenant-1", "ünïcode", "with space", strings.Repeat("x", maxTenantLen)} {
		mustPush(t, s, tenant, req)
	}
}

func TestFutureSamples(t *testing.T) {
	s := newTestStore(t, nil)
	future := time.Now().Add(time.Hour).UnixMilli()
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
		Labels:     lbls("__name__", "x"),
		Samples:    []prompb.Sample{{Timestamp: base, Value: 1}, {Timestamp: future, Value: 2}},
		Histograms: []prompb.Histogram{intHist(future+1000, 1)},
		Exemplars:  []prompb.Exemplar{ex(future, 1, "f")},
	}}}
	res, err := s.Push(context.Background(), "t", req)
	if res != (backend.Result{Accepted: 1, Rejected: 3}) || !errors.Is(err, errTooFarInFuture) {
		t.Fatalf("result %+v, error %v", res, err)
	}
	clientError(t, err)

	s2 := newTestStore(t, func(c *Config) { c.CreationGracePeriod = 0 })
	mustPush(t, s2, "t", req)
}

func TestExemplarsDisabled(t *testing.T) {
	s := newTestStore(t, func(c *Config) { c.MaxExemplars = 0 })
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
		Labels: lbls("__name__", "x"), Samples: []prompb.Sample{{Timestamp: base, Value: 1}}, Exemplars: []prompb.Exemplar{ex(base, 1, "a")},
	}}}
	mustPush(t, s, "t", req)
}

func TestExemplarWithoutSeries(t *testing.T) {
	s := newTestStore(t, nil)
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), float64(base), 1)}})
	res, err := s.Push(context.Background(), "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		{Labels: lbls("__name__", "nosamples"), Exemplars: []prompb.Exemplar{ex(base, 1, "a"), ex(base+1, 1, "b")}},
		{Labels: lbls("__name__", "x"), Exemplars: []prompb.Exemplar{ex(base, 1, "a")}},
	}})
	if res != (backend.Result{Accepted: 1, Rejected: 2}) || !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("result %+v, error %v", res, err)
	}
	clientError(t, err)
}

func TestInvalidHistogramsAreRejected(t *testing.T) {
	s := newTestStore(t, nil)
	bad := intHist(base+1000, 1)
	bad.Count = &prompb.Histogram_CountInt{CountInt: 100} // does not match the buckets
	res, err := s.Push(context.Background(), "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
		Labels:     lbls("__name__", "h"),
		Histograms: []prompb.Histogram{intHist(base, 1), bad, {Count: &prompb.Histogram_CountInt{}, ZeroCount: &prompb.Histogram_ZeroCountFloat{}, Timestamp: base + 2000}, intHist(base+3000, 1)},
	}}})
	if res != (backend.Result{Accepted: 2, Rejected: 2}) {
		t.Fatalf("result %+v, error %v", res, err)
	}
	if ce := clientError(t, err); !strings.HasPrefix(ce.Reason, `invalid native histogram for series {__name__="h"}`) {
		t.Fatalf("reason %q", ce.Reason)
	}
}

func TestMetadata(t *testing.T) {
	s := newTestStore(t, func(c *Config) { c.MaxMetadataPerTenant = 2 })
	push := func(mds ...prompb.MetricMetadata) {
		t.Helper()
		if _, err := s.Push(context.Background(), "t", &prompb.WriteRequest{Metadata: mds}); err != nil {
			t.Fatal(err)
		}
	}
	push(prompb.MetricMetadata{MetricFamilyName: "a", Type: prompb.MetricMetadata_METRIC_TYPE_COUNTER, Help: "old"},
		prompb.MetricMetadata{MetricFamilyName: ""}) // ignored
	push(prompb.MetricMetadata{MetricFamilyName: "a", Type: prompb.MetricMetadata_METRIC_TYPE_COUNTER, Help: "new", Unit: "seconds"},
		prompb.MetricMetadata{MetricFamilyName: "b", Type: prompb.MetricMetadata_METRIC_TYPE_GAUGE},
		prompb.MetricMetadata{MetricFamilyName: "c"}) // over the limit
	got := s.Metadata("t")
	if len(got) != 2 || got["a"].Help != "new" || got["a"].Unit != "seconds" || got["b"].Type != prompb.MetricMetadata_METRIC_TYPE_GAUGE {
		t.Fatalf("metadata %v", got)
	}
	got["a"] = prompb.MetricMetadata{}
	if s.Metadata("t")["a"].Help != "new" {
		t.Fatal("Metadata returned the store's own map")
	}
	if len(s.Metadata("other")) != 0 {
		t.Fatal("metadata leaked to another tenant")
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	cfg := DefaultConfig()
	cfg.Path = t.TempDir()
	s, err := New(cfg, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := float64(base)
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), b+1000, 1)}})
	_, _ = s.Push(context.Background(), "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(lbls("__name__", "x"), b, 1)}})
	if _, err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "ferry_pusher_tsdb_") {
			t.Errorf("metric %s lacks the prefix", mf.GetName())
		}
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			switch {
			case m.Counter != nil:
				values[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				values[key] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				values[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	for key, want := range map[string]float64{
		"ferry_pusher_tsdb_samples_accepted_total":                      1,
		"ferry_pusher_tsdb_samples_rejected_total{reason=out_of_order}": 1,
		"ferry_pusher_tsdb_open_tenants":                                1,
		"ferry_pusher_tsdb_head_series{tenant=t}":                       1,
		"ferry_pusher_tsdb_tenant_opens_total":                          1,
		"ferry_pusher_tsdb_sync_duration_seconds":                       1,
	} {
		if got, ok := values[key]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, want)
		}
	}
}

// TestConcurrentTenants pushes, syncs and queries many tenants at once while
// an aggressive idle timeout closes and reopens them, for the race detector
// and to check that no write is lost.
func TestConcurrentTenants(t *testing.T) {
	s := newTestStore(t, func(c *Config) { c.IdleTimeout = 5 * time.Millisecond })
	const tenants, writers, pushes = 4, 3, 30
	var wg sync.WaitGroup
	for tn := range tenants {
		for w := range writers {
			wg.Go(func() {
				tenant := fmt.Sprintf("tenant-%d", tn)
				for i := range pushes {
					req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
						floats(lbls("__name__", "c", "writer", fmt.Sprint(w)), float64(base+int64(i)*1000), float64(i)),
					}}
					if _, err := s.Push(context.Background(), tenant, req); err != nil {
						t.Error(err)
						return
					}
					if i%7 == 0 {
						time.Sleep(6 * time.Millisecond) // let the idle loop close the tenant
					}
				}
			})
		}
	}
	done := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := s.Sync(context.Background()); err != nil {
				t.Error(err)
				return
			}
			q, err := s.Queryable("tenant-0").Querier(math.MinInt64, math.MaxInt64)
			if err != nil {
				t.Error(err)
				return
			}
			_ = selectAll(t, q)
			_ = q.Close()
			time.Sleep(time.Millisecond)
		}
	})
	wg.Wait()
	close(done)
	readers.Wait()

	for tn := range tenants {
		got := queryAll(t, s, fmt.Sprintf("tenant-%d", tn))
		for w := range writers {
			if n := len(got[fmt.Sprintf(`{__name__="c", writer="%d"}`, w)]); n != pushes {
				t.Errorf("tenant %d writer %d: %d samples stored, want %d", tn, w, n, pushes)
			}
		}
	}
}

// TestRandomRequests pushes random, partly invalid requests and checks that
// nothing panics and that every sample is counted exactly once.
func TestRandomRequests(t *testing.T) {
	s := newTestStore(t, func(c *Config) { c.MaxSeriesPerTenant = 20; c.CreationGracePeriod = time.Minute })
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		req := &prompb.WriteRequest{}
		for range rng.IntN(6) {
			ts := prompb.TimeSeries{Labels: lbls("__name__", "r", "i", fmt.Sprint(rng.IntN(30)))}
			for range rng.IntN(5) {
				ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: base + rng.Int64N(100_000) - 50_000, Value: float64(rng.IntN(3))})
			}
			for range rng.IntN(3) {
				var h prompb.Histogram
				switch rng.IntN(4) {
				case 0:
					h = intHist(base+rng.Int64N(100_000), uint64(rng.IntN(3)))
				case 1:
					h = floatHist(base+rng.Int64N(100_000), float64(rng.IntN(3)))
				case 2:
					h = nhcb(base+rng.Int64N(100_000), rng.Int64N(3))
				default:
					h = prompb.Histogram{
						Count: &prompb.Histogram_CountInt{CountInt: rng.Uint64N(5)}, Schema: int32(rng.IntN(120) - 60),
						PositiveSpans:  []prompb.BucketSpan{{Offset: int32(rng.IntN(10) - 5), Length: uint32(rng.IntN(4))}},
						PositiveDeltas: []int64{rng.Int64N(5) - 2}, CustomValues: []float64{rng.Float64()},
						Timestamp: base + rng.Int64N(100_000),
					}
				}
				ts.Histograms = append(ts.Histograms, h)
			}
			for range rng.IntN(3) {
				ts.Exemplars = append(ts.Exemplars, ex(base+rng.Int64N(100_000), float64(rng.IntN(2)), fmt.Sprint(rng.IntN(3))))
			}
			if rng.IntN(20) == 0 {
				ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: time.Now().Add(time.Hour).UnixMilli()})
			}
			req.Timeseries = append(req.Timeseries, ts)
		}
		res, err := s.Push(context.Background(), "t", req)
		if res.Accepted+res.Rejected != backend.Count(req) {
			t.Fatalf("result %+v does not add up to %d (error %v)", res, backend.Count(req), err)
		}
		if (err != nil) != (res.Rejected > 0) {
			t.Fatalf("result %+v with error %v", res, err)
		}
		if err != nil {
			clientError(t, err)
		}
	}
}

// BenchmarkPush appends requests of 100 series with one fresh sample each,
// the shape of a Prometheus remote-write request in steady state. The
// timestamps advance by 1ms per request so that however many iterations run,
// the head never spans enough time to start a compaction in the background,
// which would make runs incomparable.
func BenchmarkPush(b *testing.B) {
	const seriesPerRequest = 100
	s := newTestStore(b, func(c *Config) { c.CreationGracePeriod = 0 })
	req := &prompb.WriteRequest{Timeseries: make([]prompb.TimeSeries, seriesPerRequest)}
	for i := range req.Timeseries {
		req.Timeseries[i] = prompb.TimeSeries{
			Labels:  lbls("__name__", "bench_metric", "instance", fmt.Sprintf("host-%03d:9100", i), "job", "node"),
			Samples: []prompb.Sample{{}},
		}
	}
	ctx := context.Background()
	ts := base
	samples := 0
	for b.Loop() {
		ts++
		for i := range req.Timeseries {
			req.Timeseries[i].Samples[0] = prompb.Sample{Timestamp: ts, Value: float64(ts)}
		}
		if _, err := s.Push(ctx, "bench", req); err != nil {
			b.Fatal(err)
		}
		samples += seriesPerRequest
	}
	b.ReportMetric(float64(samples)/b.Elapsed().Seconds(), "samples/s")
}

func TestSyncSkipsTenantsWithoutNewCommits(t *testing.T) {
	separateOnly(t, "every Sync syncs the one shared WAL")
	s := newTestStore(t, nil)
	mustPush(t, s, "a", replayRequest(0))
	mustPush(t, s, "b", replayRequest(0))
	if n, err := s.Sync(context.Background()); n != 2 || err != nil {
		t.Fatalf("first sync: %d tenants, %v; want 2", n, err)
	}
	if n, err := s.Sync(context.Background()); n != 0 || err != nil {
		t.Fatalf("sync without new writes: %d tenants, %v; want 0", n, err)
	}
	mustPush(t, s, "b", replayRequest(60_000)) // a minute later: in order
	if n, err := s.Sync(context.Background()); n != 1 || err != nil {
		t.Fatalf("sync after a write to b: %d tenants, %v; want 1", n, err)
	}
}

// withoutLockFile drops the store's lock file from a directory listing.
func withoutLockFile(entries []os.DirEntry) []os.DirEntry {
	return slices.DeleteFunc(entries, func(e os.DirEntry) bool { return e.Name() == lockFileName })
}
