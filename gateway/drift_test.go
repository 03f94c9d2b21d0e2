package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrylabs/ferry/limits"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
	"github.com/ferrylabs/ferry/pusher/tsdbstore"
)

// "2xx means stored": every rule the pusher applies without looking at
// stored state is applied by the gateway first, by the same function
// (limits.Limits.Filter). The table below holds the two doors and the
// store behind them together: each bad request is refused by the gateway
// (400 naming the rule), by the pusher's checks (a client error), and,
// where the rule mirrors one of the TSDB's, by a real TSDB store without
// those checks; each good one is accepted by all three.

// driftCase is one request and what every door must say of it.
type driftCase struct {
	name string
	req  *prompb.WriteRequest
	// rule is the limits rule that refuses it; "" for a good request.
	rule string
	// says is part of the gateway's answer.
	says string
	// storeKeeps says that the TSDB store alone would accept it: the rule
	// is Ferry's own (metadata bounds), not a TSDB refusal it mirrors.
	storeKeeps bool
}

func driftCases() []driftCase {
	now := time.Now().UnixMilli()
	series := func(name string, parts func(*prompb.TimeSeries)) *prompb.WriteRequest {
		ts := prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: name}, {Name: "job", Value: "drift"}}}
		parts(&ts)
		return &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{ts}}
	}
	sample := func(ts *prompb.TimeSeries) { ts.Samples = []prompb.Sample{{Value: 1, Timestamp: now}} }
	hist := func(h prompb.Histogram) func(*prompb.TimeSeries) {
		h.Timestamp = now
		return func(ts *prompb.TimeSeries) { ts.Histograms = []prompb.Histogram{h} }
	}
	count := func(n uint64) *prompb.Histogram_CountInt { return &prompb.Histogram_CountInt{CountInt: n} }
	twoBuckets := []prompb.BucketSpan{{Offset: 0, Length: 2}}
	exemplar := func(labelRunes int) prompb.Exemplar {
		return prompb.Exemplar{Labels: []prompb.Label{{Name: "trace_id", Value: strings.Repeat("a", labelRunes-len("trace_id"))}}, Value: 1, Timestamp: now}
	}
	metadata := func(mds ...prompb.MetricMetadata) *prompb.WriteRequest {
		req := series("up", sample)
		req.Metadata = mds
		return req
	}
	help := func(n int) prompb.MetricMetadata {
		return prompb.MetricMetadata{Type: prompb.MetricMetadata_METRIC_TYPE_GAUGE, MetricFamilyName: "up", Help: strings.Repeat("h", n)}
	}
	return []driftCase{
		{name: "a float sample", req: series("up", sample)},
		{name: "an integer histogram", req: series("h", hist(prompb.Histogram{Count: count(3), Sum: 2, Schema: 1, PositiveSpans: twoBuckets, PositiveDeltas: []int64{1, 1}}))},
		{name: "a float histogram", req: series("h", hist(prompb.Histogram{Count: &prompb.Histogram_CountFloat{CountFloat: 3}, Sum: 2, Schema: 1, PositiveSpans: twoBuckets, PositiveCounts: []float64{1, 2}}))},
		{name: "a histogram of schema 10, reduced to 8", req: series("h", hist(prompb.Histogram{Count: count(3), Sum: 2, Schema: 10, PositiveSpans: twoBuckets, PositiveDeltas: []int64{1, 1}}))},
		{name: "an exemplar beside a sample", req: series("up", func(ts *prompb.TimeSeries) { sample(ts); ts.Exemplars = []prompb.Exemplar{exemplar(128)} })},
		{name: "metadata at its length limit", req: metadata(help(1024))},

		{name: "a histogram whose count is not its buckets' sum", rule: limits.RuleHistogram, says: "observations found in buckets",
			req: series("h", hist(prompb.Histogram{Count: count(5), Sum: 2, Schema: 1, PositiveSpans: twoBuckets, PositiveDeltas: []int64{1, 1}}))},
		{name: "a histogram whose spans do not cover its buckets", rule: limits.RuleHistogram, says: "spans need",
			req: series("h", hist(prompb.Histogram{Count: count(2), Sum: 2, Schema: 1, PositiveSpans: []prompb.BucketSpan{{Offset: 0, Length: 3}}, PositiveDeltas: []int64{1, 0}}))},
		{name: "a histogram of schema 60", rule: limits.RuleHistogram, says: "schema",
			req: series("h", hist(prompb.Histogram{Count: count(0), Schema: 60}))},
		{name: "a histogram of negative bucket counts", rule: limits.RuleHistogram, says: "negative",
			req: series("h", hist(prompb.Histogram{Count: count(0), Schema: 1, PositiveSpans: twoBuckets, PositiveDeltas: []int64{1, -2}}))},
		{name: "a float histogram with integer deltas", rule: limits.RuleHistogram, says: "integer bucket deltas",
			req: series("h", hist(prompb.Histogram{Count: &prompb.Histogram_CountFloat{CountFloat: 2}, Schema: 1, PositiveSpans: twoBuckets, PositiveDeltas: []int64{1, 0}}))},
		{name: "an exemplar on a series without samples", rule: limits.RuleExemplarNoSample, says: "exemplar on a series without samples",
			req: series("up", func(ts *prompb.TimeSeries) { ts.Exemplars = []prompb.Exemplar{exemplar(20)} })},
		{name: "exemplar labels of 129 runes", rule: limits.RuleExemplarLabelsLen, says: "exemplar labels of 129 runes",
			req: series("up", func(ts *prompb.TimeSeries) { sample(ts); ts.Exemplars = []prompb.Exemplar{exemplar(129)} })},
		{name: "an exemplar label name twice", rule: limits.RuleExemplarLabels, says: "twice",
			req: series("up", func(ts *prompb.TimeSeries) {
				sample(ts)
				ts.Exemplars = []prompb.Exemplar{{Labels: []prompb.Label{{Name: "a", Value: "1"}, {Name: "a", Value: "2"}}, Value: 1, Timestamp: now}}
			})},
		{name: "an exemplar of long labels without values", req: series("up", func(ts *prompb.TimeSeries) {
			sample(ts)
			ts.Exemplars = []prompb.Exemplar{{Labels: []prompb.Label{{Name: "trace_id", Value: "1"}, {Name: strings.Repeat("x", 200)}}, Value: 1, Timestamp: now}}
		})},
		{name: "a sample too far in the future", rule: limits.RuleSampleTime, says: "too far in the future",
			req: series("up", func(ts *prompb.TimeSeries) {
				ts.Samples = []prompb.Sample{{Value: 1, Timestamp: now + time.Hour.Milliseconds()}}
			})},
		{name: "a sample before the past grace period", rule: limits.RuleSampleTime, says: "too far in the past",
			req: series("up", func(ts *prompb.TimeSeries) { ts.Samples = []prompb.Sample{{Value: 1, Timestamp: 1000}} })},
		{name: "an invalid metric name", rule: limits.RuleLabels, says: "invalid metric name", storeKeeps: true,
			req: series("0up\xff", sample)},
		{name: "a help text over its limit", rule: limits.RuleMetadata, says: "-limits.max-metadata-length", storeKeeps: true,
			req: metadata(help(1025))},
		{name: "metadata without a family name", rule: limits.RuleMetadata, says: "without a metric family name", storeKeeps: true,
			req: metadata(prompb.MetricMetadata{Type: prompb.MetricMetadata_METRIC_TYPE_GAUGE, Help: "h"})},
		{name: "a request's metadata over its bytes", rule: limits.RuleMetadata, says: "-limits.max-metadata-bytes-per-request", storeKeeps: true,
			req: metadata(func() (mds []prompb.MetricMetadata) {
				for i := range 1100 {
					md := help(1000)
					md.MetricFamilyName = "up" + strings.Repeat("_", i%50) + string(rune('a'+i%26))
					mds = append(mds, md)
				}
				return mds
			}()...)},
	}
}

// clone copies req through its encoding: Filter and the store change it.
func clone(t *testing.T, req *prompb.WriteRequest) *prompb.WriteRequest {
	t.Helper()
	b, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var out prompb.WriteRequest
	if err := out.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	return &out
}

func TestTheGatewayRefusesWhatThePusherWouldRefuseAndNothingElse(t *testing.T) {
	t.Parallel()
	g := newTestGateway(t, &fakeProducer{}, nil)
	// The pusher applies the same limits.Limits.Filter with the same
	// limits (the applier turns its first violation into a CLIENT_ERROR).
	checks := g.cfg.Limits
	cfg := tsdbstore.DefaultConfig()
	cfg.Path = t.TempDir()
	cfg.MaxExemplars = 1000 // exemplar rules apply where exemplars are stored
	store, err := tsdbstore.New(cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	for i, tc := range driftCases() {
		t.Run(tc.name, func(t *testing.T) {
			w := post(t, g, "/api/v1/push", ctV1, "t", v1Body(t, tc.req))
			_, clientErr := checks.Filter(clone(t, tc.req), time.Now())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// A tenant per case: one case's series cannot make another's
			// exemplar find a sample.
			_, storeErr := store.Push(ctx, "drift-"+string(rune('a'+i)), clone(t, tc.req))
			if tc.rule == "" {
				if w.Code != http.StatusNoContent || clientErr != nil || storeErr != nil {
					t.Fatalf("gateway %d %q, pusher's checks %v, store %v: want all to accept it", w.Code, w.Body, clientErr, storeErr)
				}
				return
			}
			if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), tc.says) {
				t.Errorf("gateway answered %d %q, want 400 saying %q", w.Code, w.Body, tc.says)
			}
			var v *limits.Violation
			if clientErr == nil || !errors.As(clientErr, &v) || v.Rule != tc.rule {
				t.Errorf("pusher's checks answered %v, want a client error of rule %s", clientErr, tc.rule)
			}
			switch {
			case tc.storeKeeps && storeErr != nil:
				t.Errorf("store refused %v; the case says it keeps it", storeErr)
			case !tc.storeKeeps && !backend.IsClientError(storeErr):
				t.Errorf("store answered %v, want the client error the rule mirrors", storeErr)
			}
		})
	}
}
