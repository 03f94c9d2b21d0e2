package tsdbstore

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// pushBatch calls PushBatch and fails the test on a batch failure.
func pushBatch(t *testing.T, s *Store, tenant string, reqs ...*prompb.WriteRequest) []backend.Outcome {
	t.Helper()
	out := make([]backend.Outcome, len(reqs))
	if err := s.PushBatch(context.Background(), tenant, reqs, out); err != nil {
		t.Fatalf("PushBatch: %v", err)
	}
	return out
}

// TestPushBatchAcceptsASeriesAcrossRequests: requests of a batch append to
// the same series in increasing time, in one appender; the head takes
// several pending samples of a series, and every one must be accepted and
// stored, with one commit for the batch.
func TestPushBatchAcceptsASeriesAcrossRequests(t *testing.T) {
	s := newTestStore(t, nil)
	ls := lbls("__name__", "m", "job", "a")
	mustPush(t, s, "t", &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(ls, float64(base), 0)}})
	var reqs []*prompb.WriteRequest
	for i := 1; i <= 5; i++ {
		reqs = append(reqs, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
			floats(ls, float64(base+int64(i)*1000), float64(i), float64(base+int64(i)*1000+500), float64(i)+0.5),
			floats(lbls("__name__", "m", "job", fmt.Sprint("new", i)), float64(base+int64(i)*1000), float64(i)),
		}})
	}
	tdb := s.tenants.byID[s.cfg.dbID("t")]
	commits := tdb.commits.Load()
	for i, o := range pushBatch(t, s, "t", reqs...) {
		if o.Err != nil || o.Result != (backend.Result{Accepted: 3}) {
			t.Errorf("request %d: %+v, %v; want 3 accepted", i, o.Result, o.Err)
		}
	}
	if got := tdb.commits.Load() - commits; got != 1 {
		t.Errorf("%d commits for the batch, want 1", got)
	}
	got := queryAll(t, s, "t")
	want := []float64{float64(base), 0}
	for i := 1; i <= 5; i++ {
		want = append(want, float64(base+int64(i)*1000), float64(i), float64(base+int64(i)*1000+500), float64(i)+0.5)
	}
	if f := floatsOf(got[toLabels(ls).String()]); !slices.Equal(f, want) {
		t.Errorf("stored %v, want %v", f, want)
	}
	if len(got) != 6 {
		t.Errorf("%d series stored, want 6", len(got))
	}
}

// TestPushBatchAnswersEachRequest: a request with rejected samples in the
// middle of a batch gets its own client error and counts, and the others
// are accepted whole.
func TestPushBatchAnswersEachRequest(t *testing.T) {
	s := newTestStore(t, nil)
	ls := lbls("__name__", "m")
	future := float64(time.Now().Add(time.Hour).UnixMilli())
	out := pushBatch(t, s, "t",
		&prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(ls, float64(base), 1)}},
		&prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(ls, float64(base), 2, float64(base+1000), 3, future, 4)}},
		&prompb.WriteRequest{Timeseries: []prompb.TimeSeries{floats(ls, float64(base+2000), 5)}},
	)
	if o := out[0]; o.Err != nil || o.Result != (backend.Result{Accepted: 1}) {
		t.Errorf("request 0: %+v, %v; want 1 accepted", o.Result, o.Err)
	}
	if o := out[1]; o.Result != (backend.Result{Accepted: 1, Rejected: 2}) {
		t.Errorf("request 1: %+v, want 1 accepted and 2 rejected", o.Result)
	} else if ce := clientError(t, o.Err); !strings.Contains(ce.Reason, "duplicate sample for timestamp") {
		t.Errorf("request 1: reason %q does not name the duplicate, its first rejected sample", ce.Reason)
	}
	if o := out[2]; o.Err != nil || o.Result != (backend.Result{Accepted: 1}) {
		t.Errorf("request 2: %+v, %v; want 1 accepted", o.Result, o.Err)
	}
	want := []float64{float64(base), 1, float64(base + 1000), 3, float64(base + 2000), 5}
	if f := floatsOf(queryAll(t, s, "t")[toLabels(ls).String()]); !slices.Equal(f, want) {
		t.Errorf("stored %v, want %v", f, want)
	}
}

// TestPushBatchFailsWhole: a failure that is not one request's fails the
// batch, and nothing of it is stored.
func TestPushBatchFailsWhole(t *testing.T) {
	s := newTestStore(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	reqs := []*prompb.WriteRequest{floatReq(base, 1), floatReq(base+1000, 2)}
	err := s.PushBatch(ctx, "t", reqs, make([]backend.Outcome, 2))
	serverError(t, err)
	if got := queryAll(t, s, "t"); len(got) != 0 {
		t.Errorf("stored %v after a failed batch", got)
	}
}

// TestPushBatchEqualsPushingOneByOne is the differential test of batching:
// a random sequence of requests, in order, out of order, duplicate,
// replayed, with histograms, exemplars, series over the limit, samples in
// the future and jumps of the head's time, is pushed one request at a time
// into one store and in random batches into another. Every request must
// get the same answer from both, and both must store the same.
func TestPushBatchEqualsPushingOneByOne(t *testing.T) {
	for _, c := range []struct {
		seed uint64
		ooo  time.Duration
	}{{1, 0}, {2, 0}, {3, 0}, {4, 0}, {5, 30 * time.Minute}} {
		t.Run(fmt.Sprintf("seed=%d/ooo=%v", c.seed, c.ooo), func(t *testing.T) {
			seed := c.seed
			modify := func(cfg *Config) { cfg.MaxSeriesPerTenant = 25; cfg.OutOfOrderWindow = c.ooo }
			alone, batched := newTestStore(t, modify), newTestStore(t, modify)
			rng := rand.New(rand.NewPCG(seed, 7))
			reqs := randomSequence(rng, 400)
			ctx := context.Background()
			want := make([]backend.Outcome, len(reqs))
			for i, req := range reqs {
				res, err := alone.Push(ctx, "t", req)
				if err != nil && !backend.IsClientError(err) {
					t.Fatalf("request %d: %v", i, err)
				}
				want[i] = backend.Outcome{Result: res, Err: err}
			}
			got := make([]backend.Outcome, len(reqs))
			batches := 0
			for i := 0; i < len(reqs); {
				n := min(1+rng.IntN(8), len(reqs)-i)
				if err := batched.PushBatch(ctx, "t", reqs[i:i+n], got[i:i+n]); err != nil {
					t.Fatalf("batch at %d: %v", i, err)
				}
				i += n
				batches++
			}
			differ := 0
			for i := range reqs {
				if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
					differ++
					t.Errorf("request %d: batched %v, alone %v", i, got[i], want[i])
				}
			}
			if differ > 0 {
				t.Fatalf("%d of %d requests answered otherwise batched", differ, len(reqs))
			}
			if a, b := fmt.Sprint(queryAll(t, alone, "t")), fmt.Sprint(queryAll(t, batched, "t")); a != b {
				t.Errorf("stored data differs:\nalone   %s\nbatched %s", a, b)
			}
			if a, b := exemplarsOf(t, alone), exemplarsOf(t, batched); a != b {
				t.Errorf("stored exemplars differ:\nalone   %s\nbatched %s", a, b)
			}
			if a, b := fmt.Sprint(alone.Metadata("t")), fmt.Sprint(batched.Metadata("t")); a != b {
				t.Errorf("metadata differs:\nalone   %s\nbatched %s", a, b)
			}
			t.Logf("%d requests in %d batches", len(reqs), batches)
		})
	}
}

// randomSequence returns n requests of one tenant as a sender might send
// them, with everything that can go wrong.
func randomSequence(rng *rand.Rand, n int) []*prompb.WriteRequest {
	// The head starts near its range's start; time advances a second per
	// request and jumps twice by more than half the block range, so that
	// older samples fall below the head's lower bound, while staying
	// within one and a half block ranges, where the head compacts.
	cursor := time.Now().Add(-170 * time.Minute).UnixMilli()
	future := time.Now().Add(time.Hour).UnixMilli()
	jumps := map[int]bool{n / 3: true, 2 * n / 3: true}
	var reqs []*prompb.WriteRequest
	for i := range n {
		cursor += 1000
		if jumps[i] {
			cursor += (65 * time.Minute).Milliseconds()
		}
		if i > 0 && rng.IntN(10) == 0 {
			// A replay of an earlier request.
			reqs = append(reqs, reqs[rng.IntN(len(reqs))])
			continue
		}
		req := &prompb.WriteRequest{}
		for range rng.IntN(5) {
			series := fmt.Sprint(rng.IntN(30))
			ts := prompb.TimeSeries{Labels: lbls("__name__", "r", "i", series)}
			switch rng.IntN(8) {
			case 0: // Another spelling of the series: unsorted.
				ts.Labels = lbls("i", series, "__name__", "r")
			case 1: // And another: a label with no value is no label.
				ts.Labels = lbls("__name__", "r", "e", "", "i", series)
			}
			at := func() int64 {
				switch rng.IntN(12) {
				case 0:
					return cursor - rng.Int64N(10_000) // out of order, or below the bound after a jump
				case 1:
					return cursor - 1000 // the previous request's time
				case 2:
					return future
				case 3:
					// Late: older than half a block range, below the
					// head's lower bound, unless time just jumped.
					return cursor - (65 * time.Minute).Milliseconds() + rng.Int64N(10_000)
				default:
					return cursor + rng.Int64N(3)
				}
			}
			for range rng.IntN(4) {
				ts.Samples = append(ts.Samples, prompb.Sample{Timestamp: at(), Value: float64(rng.IntN(2))})
			}
			if rng.IntN(4) == 0 {
				for range 1 + rng.IntN(2) {
					if rng.IntN(2) == 0 {
						ts.Histograms = append(ts.Histograms, intHist(at(), uint64(rng.IntN(2))))
					} else {
						ts.Histograms = append(ts.Histograms, floatHist(at(), float64(rng.IntN(2))))
					}
				}
			}
			if rng.IntN(4) == 0 {
				ts.Exemplars = append(ts.Exemplars, ex(at(), float64(rng.IntN(2)), fmt.Sprint(rng.IntN(3))))
			}
			req.Timeseries = append(req.Timeseries, ts)
		}
		if rng.IntN(20) == 0 {
			req.Metadata = []prompb.MetricMetadata{{MetricFamilyName: "r", Help: fmt.Sprint(i)}}
		}
		reqs = append(reqs, req)
	}
	return reqs
}

// exemplarsOf returns the tenant's stored exemplars, printed.
func exemplarsOf(t *testing.T, s *Store) string {
	t.Helper()
	eq, err := s.ExemplarQueryable("t").ExemplarQuerier(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	res, err := eq.Select(math.MinInt64, math.MaxInt64, []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+")})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(res, func(a, b exemplar.QueryResult) int { return labels.Compare(a.SeriesLabels, b.SeriesLabels) })
	return fmt.Sprint(res)
}

// TestPushBatchRefusesAsTheHeadWould pushes a batch whose requests
// conflict with the pending samples of the ones before them, each case the
// TSDB would refuse had they been committed, and compares every answer and
// the stored data with pushing the requests one by one.
func TestPushBatchRefusesAsTheHeadWould(t *testing.T) {
	x, y := lbls("__name__", "x"), lbls("__name__", "y")
	at := func(d time.Duration) float64 { return float64(base + d.Milliseconds()) }
	req := func(ts ...prompb.TimeSeries) *prompb.WriteRequest { return &prompb.WriteRequest{Timeseries: ts} }
	hist := func(ls []prompb.Label, h prompb.Histogram) prompb.TimeSeries {
		return prompb.TimeSeries{Labels: ls, Histograms: []prompb.Histogram{h}}
	}
	withEx := func(ts prompb.TimeSeries, es ...prompb.Exemplar) prompb.TimeSeries { ts.Exemplars = es; return ts }
	for _, c := range []struct {
		name  string
		ooo   time.Duration
		setup []*prompb.WriteRequest
		batch []*prompb.WriteRequest
	}{
		{
			// The head's newest sample is committed; the batch appends
			// older ones, then one of a series below the head's bound.
			name:  "below the committed bound",
			setup: []*prompb.WriteRequest{req(floats(x, at(time.Hour), 1))},
			batch: []*prompb.WriteRequest{req(floats(y, at(10*time.Minute), 1)), req(floats(y, at(-5*time.Minute), 2))},
		},
		{
			name:  "below the bound the batch moved",
			setup: []*prompb.WriteRequest{req(floats(x, at(0), 1))},
			batch: []*prompb.WriteRequest{req(floats(x, at(65*time.Minute), 1)), req(floats(y, at(time.Second), 2))},
		},
		{
			name:  "the same sample again, then an older one",
			batch: []*prompb.WriteRequest{req(floats(x, at(2*time.Second), 1)), req(floats(x, at(2*time.Second), 1), floats(x, at(time.Second), 1))},
		},
		{
			name:  "older, then the same timestamp with another value",
			batch: []*prompb.WriteRequest{req(floats(x, at(2*time.Second), 1)), req(floats(x, at(time.Second), 1), floats(x, at(2*time.Second), 2))},
		},
		{
			name:  "a float where a histogram is",
			batch: []*prompb.WriteRequest{req(hist(x, intHist(int64(at(time.Second)), 1))), req(floats(x, at(time.Second), 1))},
		},
		{
			name:  "another histogram at the same timestamp",
			batch: []*prompb.WriteRequest{req(hist(x, intHist(int64(at(time.Second)), 1))), req(hist(x, floatHist(int64(at(time.Second)), 1)), hist(x, intHist(int64(at(time.Second)), 1)))},
		},
		{
			name: "exemplars after exemplars",
			batch: []*prompb.WriteRequest{
				req(withEx(floats(x, at(time.Second), 1), ex(int64(at(time.Second)), 1, "a"))),
				req(withEx(floats(x, at(2*time.Second), 1), ex(int64(at(time.Second)), 1, "a"), ex(int64(at(0)), 1, "b"))),
			},
		},
		{
			name:  "out of order with a window",
			ooo:   time.Hour,
			batch: []*prompb.WriteRequest{req(floats(x, at(2*time.Hour), 1)), req(floats(x, at(30*time.Minute), 1), floats(y, at(-time.Minute), 1))},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			modify := func(cfg *Config) { cfg.OutOfOrderWindow = c.ooo }
			alone, batched := newTestStore(t, modify), newTestStore(t, modify)
			for _, s := range []*Store{alone, batched} {
				for _, r := range c.setup {
					mustPush(t, s, "t", r)
				}
			}
			got := pushBatch(t, batched, "t", c.batch...)
			refused := false
			for i, r := range c.batch {
				res, err := alone.Push(context.Background(), "t", r)
				want := backend.Outcome{Result: res, Err: err}
				refused = refused || err != nil
				if fmt.Sprint(got[i]) != fmt.Sprint(want) {
					t.Errorf("request %d: batched %v, alone %v", i, got[i], want)
				}
			}
			if !refused {
				t.Error("no sample was refused: the case tests nothing")
			}
			if a, b := fmt.Sprint(queryAll(t, alone, "t")), fmt.Sprint(queryAll(t, batched, "t")); a != b {
				t.Errorf("stored data differs:\nalone   %s\nbatched %s", a, b)
			}
			if a, b := exemplarsOf(t, alone), exemplarsOf(t, batched); a != b {
				t.Errorf("stored exemplars differ:\nalone   %s\nbatched %s", a, b)
			}
		})
	}
}
