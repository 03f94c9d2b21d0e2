package limits

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/common/model"

	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// filterNow is the wall clock of the Filter tests.
var filterNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// testLimits are small enough that each limit is easy to cross, with the
// legacy name rule the tables of this file were written for (names_test.go
// has UTF-8's).
var testLimits = Limits{
	MaxLabelsPerSeries:  5,
	MaxLabelNameLength:  16,
	MaxLabelValueLength: 32,
	CreationGracePeriod: 10 * time.Minute,
	NameValidation:      model.LegacyValidation,
}

// goodTs is a valid sample timestamp: a minute before filterNow.
var goodTs = filterNow.Add(-time.Minute).UnixMilli()

// futureTs is past the creation grace period.
var futureTs = filterNow.Add(11 * time.Minute).UnixMilli()

// labels builds labels from name, value pairs.
func labels(nv ...string) []prompb.Label {
	ls := make([]prompb.Label, 0, len(nv)/2)
	for i := 0; i+1 < len(nv); i += 2 {
		ls = append(ls, prompb.Label{Name: nv[i], Value: nv[i+1]})
	}
	return ls
}

// series returns a series with one valid sample per value.
func series(ls []prompb.Label, values ...float64) prompb.TimeSeries {
	ts := prompb.TimeSeries{Labels: ls}
	for i, v := range values {
		ts.Samples = append(ts.Samples, prompb.Sample{Value: v, Timestamp: goodTs + int64(i)})
	}
	return ts
}

func TestFilter(t *testing.T) {
	t.Parallel()
	up := labels("__name__", "up", "job", "node")
	for _, tc := range []struct {
		name     string
		series   []prompb.TimeSeries
		rejected int64
		// kept lists the metric name of each series left, in order.
		kept []string
		// keptSamples is what Count says of the filtered request.
		keptSamples int64
		// reason is part of the first problem; "" means none.
		reason string
	}{
		{
			name:        "should leave a valid request untouched",
			series:      []prompb.TimeSeries{series(up, 1, 2), series(labels("__name__", "ns:rate_5m", "_x", "y"), 3)},
			kept:        []string{"up", "ns:rate_5m"},
			keptSamples: 3,
		},
		{
			name:        "should accept an empty request",
			keptSamples: 0,
		},
		{
			name:     "should reject a series without a metric name",
			series:   []prompb.TimeSeries{series(labels("job", "node"), 1, 2)},
			rejected: 2,
			reason:   "missing metric name",
		},
		{
			name:     "should reject a series without labels",
			series:   []prompb.TimeSeries{series(nil, 1)},
			rejected: 1,
			reason:   "missing metric name",
		},
		{
			name:     "should reject a metric name starting with a digit",
			series:   []prompb.TimeSeries{series(labels("__name__", "1up"), 1)},
			rejected: 1,
			reason:   `invalid metric name "1up"`,
		},
		{
			name:     "should reject an empty metric name",
			series:   []prompb.TimeSeries{series(labels("__name__", ""), 1)},
			rejected: 1,
			reason:   `invalid metric name ""`,
		},
		{
			name:     "should reject a metric name with a dash",
			series:   []prompb.TimeSeries{series(labels("__name__", "http-requests"), 1)},
			rejected: 1,
			reason:   "invalid metric name",
		},
		{
			name:     "should reject a label name starting with a digit",
			series:   []prompb.TimeSeries{series(labels("__name__", "up", "0job", "x"), 1)},
			rejected: 1,
			reason:   `invalid label name "0job"`,
		},
		{
			name:     "should reject a label name with a dash",
			series:   []prompb.TimeSeries{series(labels("__name__", "up", "job-name", "x"), 1)},
			rejected: 1,
			reason:   `invalid label name "job-name"`,
		},
		{
			name:     "should reject a label name with a colon",
			series:   []prompb.TimeSeries{series(labels("__name__", "up", "a:b", "x"), 1)},
			rejected: 1,
			reason:   `invalid label name "a:b"`,
		},
		{
			name:     "should reject an empty label name",
			series:   []prompb.TimeSeries{series(labels("__name__", "up", "", "x"), 1)},
			rejected: 1,
			reason:   `invalid label name ""`,
		},
		{
			name:     "should reject duplicate label names",
			series:   []prompb.TimeSeries{series(labels("__name__", "up", "job", "a", "job", "b"), 1)},
			rejected: 1,
			reason:   `duplicate label name "job"`,
		},
		{
			name:     "should reject a duplicate metric name label",
			series:   []prompb.TimeSeries{series(labels("__name__", "up", "__name__", "down"), 1)},
			rejected: 1,
			reason:   `duplicate label name "__name__"`,
		},
		{
			name:     "should reject duplicate label names that are not neighbours",
			series:   []prompb.TimeSeries{series(labels("__name__", "up", "job", "a", "cpu", "1", "job", "b"), 1)},
			rejected: 1,
			reason:   `duplicate label name "job"`,
		},
		{
			name:     "should reject a duplicate found where the order first breaks",
			series:   []prompb.TimeSeries{series(labels("__name__", "up", "a", "1", "b", "2", "a", "3"), 1)},
			rejected: 1,
			reason:   `duplicate label name "a"`,
		},
		{
			name:     "should reject a duplicate after the order broke",
			series:   []prompb.TimeSeries{series(labels("__name__", "up", "b", "1", "a", "2", "c", "3", "b", "4"), 1)},
			rejected: 1,
			reason:   `duplicate label name "b"`,
		},
		{
			name:     "should reject a second metric name after other labels",
			series:   []prompb.TimeSeries{series(labels("__name__", "up", "job", "x", "__name__", "down"), 1)},
			rejected: 1,
			reason:   `duplicate label name "__name__"`,
		},
		{
			name:        "should accept unsorted labels without duplicates",
			series:      []prompb.TimeSeries{series(labels("job", "x", "__name__", "up", "cpu", "1", "Zone", "z"), 1)},
			kept:        []string{"up"},
			keptSamples: 1,
		},
		{
			name:        "should accept non-ASCII label values",
			series:      []prompb.TimeSeries{series(labels("__name__", "up", "a", "zürich", "b", "überwachung-日本", "c", "abcdefg\xc3\xa9", "d", "\xf0\x9f\x98\x80"), 1)},
			kept:        []string{"up"},
			keptSamples: 1,
		},
		{
			name:     "should reject a value whose invalid byte follows eight ASCII bytes",
			series:   []prompb.TimeSeries{series(labels("__name__", "up", "job", "abcdefgh\xff"), 1)},
			rejected: 1,
			reason:   `value of label "job" is not valid UTF-8`,
		},
		{
			name:     "should reject a value whose invalid byte is in its second eight bytes",
			series:   []prompb.TimeSeries{series(labels("__name__", "up", "job", "abcdefghij\xffklmnop"), 1)},
			rejected: 1,
			reason:   `value of label "job" is not valid UTF-8`,
		},
		{
			name:     "should reject a value cut inside a multi-byte rune",
			series:   []prompb.TimeSeries{series(labels("__name__", "up", "job", "zürich", "mode", "abcdefg\xc3"), 1)},
			rejected: 1,
			reason:   `value of label "mode" is not valid UTF-8`,
		},
		{
			name:     "should reject a surrogate encoded in UTF-8 after non-ASCII text",
			series:   []prompb.TimeSeries{series(labels("__name__", "up", "job", "é\xed\xa0\x80"), 1)},
			rejected: 1,
			reason:   `value of label "job" is not valid UTF-8`,
		},
		{
			name:     "should reject more labels than the limit",
			series:   []prompb.TimeSeries{series(labels("__name__", "up", "a", "1", "b", "2", "c", "3", "d", "4", "e", "5"), 1, 2, 3)},
			rejected: 3,
			reason:   "series has 6 labels, more than the limit of 5",
		},
		{
			name:        "should accept exactly the label limit",
			series:      []prompb.TimeSeries{series(labels("__name__", "up", "a", "1", "b", "2", "c", "3", "d", "4"), 1)},
			kept:        []string{"up"},
			keptSamples: 1,
		},
		{
			name:     "should reject a label name longer than the limit",
			series:   []prompb.TimeSeries{series(labels("__name__", "up", strings.Repeat("n", 17), "x"), 1)},
			rejected: 1,
			reason:   "label name of 17 bytes is longer than the limit of 16",
		},
		{
			name:     "should reject a label value longer than the limit",
			series:   []prompb.TimeSeries{series(labels("__name__", "up", "job", strings.Repeat("v", 33)), 1)},
			rejected: 1,
			reason:   `value of label "job" has 33 bytes, more than the limit of 32`,
		},
		{
			name:     "should reject a metric name longer than the label value limit",
			series:   []prompb.TimeSeries{series(labels("__name__", strings.Repeat("m", 33)), 1)},
			rejected: 1,
			reason:   `value of label "__name__" has 33 bytes, more than the limit of 32`,
		},
		{
			name:     "should reject a label value that is not UTF-8",
			series:   []prompb.TimeSeries{series(labels("__name__", "up", "job", "a\xffb"), 1)},
			rejected: 1,
			reason:   `value of label "job" is not valid UTF-8`,
		},
		{
			name: "should drop a sample too far in the future and keep the rest of the series",
			series: []prompb.TimeSeries{{
				Labels:  up,
				Samples: []prompb.Sample{{Value: 1, Timestamp: goodTs}, {Value: 2, Timestamp: futureTs}, {Value: 3, Timestamp: goodTs + 1}},
			}},
			rejected:    1,
			kept:        []string{"up"},
			keptSamples: 2,
			reason:      "is too far in the future",
		},
		{
			name: "should accept a sample at the end of the grace period",
			series: []prompb.TimeSeries{{
				Labels:  up,
				Samples: []prompb.Sample{{Value: 1, Timestamp: filterNow.Add(10 * time.Minute).UnixMilli()}},
			}},
			kept:        []string{"up"},
			keptSamples: 1,
		},
		{
			name: "should drop a sample before 1970",
			series: []prompb.TimeSeries{{
				Labels:  up,
				Samples: []prompb.Sample{{Value: 1, Timestamp: -1}, {Value: 2, Timestamp: 0}},
			}},
			rejected:    1,
			kept:        []string{"up"},
			keptSamples: 1,
			reason:      "timestamp -1 is before 1970",
		},
		{
			name: "should drop histograms with bad timestamps",
			series: []prompb.TimeSeries{{
				Labels: up,
				Histograms: []prompb.Histogram{
					{Count: &prompb.Histogram_CountInt{CountInt: 1}, ZeroCount: &prompb.Histogram_ZeroCountInt{ZeroCountInt: 1}, Timestamp: goodTs},
					{Count: &prompb.Histogram_CountInt{CountInt: 2}, Timestamp: futureTs},
					{Count: &prompb.Histogram_CountInt{CountInt: 3}, Timestamp: -1000},
				},
			}},
			rejected:    2,
			kept:        []string{"up"},
			keptSamples: 1,
			reason:      "too far in the future",
		},
		{
			name: "should drop exemplars with bad timestamps",
			series: []prompb.TimeSeries{{
				Labels:  up,
				Samples: []prompb.Sample{{Value: 1, Timestamp: goodTs}},
				Exemplars: []prompb.Exemplar{
					{Labels: labels("trace_id", "abc"), Value: 1, Timestamp: -5},
					{Labels: labels("trace_id", "def"), Value: 1, Timestamp: goodTs},
				},
			}},
			rejected:    1,
			kept:        []string{"up"},
			keptSamples: 2,
			reason:      "timestamp -5 is before 1970",
		},
		{
			name: "should count samples, histograms and exemplars of a rejected series",
			series: []prompb.TimeSeries{{
				Labels:     labels("job", "no-name"),
				Samples:    []prompb.Sample{{Timestamp: goodTs}, {Timestamp: goodTs + 1}},
				Histograms: []prompb.Histogram{{Timestamp: goodTs}},
				Exemplars:  []prompb.Exemplar{{Timestamp: goodTs}},
			}},
			rejected: 4,
			reason:   "missing metric name",
		},
		{
			name: "should keep the good series of a mixed request and name the first bad one",
			series: []prompb.TimeSeries{
				series(labels("__name__", "good_a"), 1, 2),
				series(labels("__name__", "bad", "0x", "first"), 1, 2, 3),
				series(labels("__name__", "good_b", "job", "x"), 1),
				series(labels("job", "second"), 1, 2, 3, 4),
				{
					Labels:  labels("__name__", "good_c"),
					Samples: []prompb.Sample{{Timestamp: futureTs}, {Timestamp: goodTs}},
				},
			},
			rejected:    3 + 4 + 1,
			kept:        []string{"good_a", "good_b", "good_c"},
			keptSamples: 2 + 1 + 1,
			reason:      `invalid label name "0x" (-limits.name-validation-scheme=legacy: [a-zA-Z_][a-zA-Z0-9_]*) for series {__name__="bad", "0x"="first"}`,
		},
		{
			name: "should name the series of a timestamp problem when it comes first",
			series: []prompb.TimeSeries{
				{Labels: labels("__name__", "early"), Samples: []prompb.Sample{{Timestamp: -1}}},
				series(labels("__name__", "bad-name"), 1),
			},
			rejected:    2,
			kept:        []string{"early"},
			keptSamples: 0,
			reason:      `before 1970 for series {__name__="early"}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := &prompb.WriteRequest{Timeseries: tc.series}
			total := Count(req)
			rejected, first := testLimits.Filter(req, filterNow)
			if rejected != tc.rejected {
				t.Errorf("rejected = %d, want %d", rejected, tc.rejected)
			}
			if got := Count(req); got != tc.keptSamples {
				t.Errorf("samples kept = %d, want %d", got, tc.keptSamples)
			}
			if got := Count(req) + rejected; got != total {
				t.Errorf("kept + rejected = %d, want the %d of the request", got, total)
			}
			var kept []string
			for _, ts := range req.Timeseries {
				kept = append(kept, metricName(ts.Labels))
			}
			if strings.Join(kept, ",") != strings.Join(tc.kept, ",") {
				t.Errorf("series kept = %q, want %q", kept, tc.kept)
			}
			switch {
			case tc.reason == "" && first != nil:
				t.Errorf("Filter() = %q, want no problem", first)
			case tc.reason != "" && first == nil:
				t.Errorf("Filter() = nil, want a problem with %q", tc.reason)
			case tc.reason != "" && !strings.Contains(first.Error(), tc.reason):
				t.Errorf("Filter() = %q, want it to contain %q", first, tc.reason)
			}
		})
	}
}

// metricName returns the value of __name__, or "".
func metricName(ls []prompb.Label) string {
	for _, lb := range ls {
		if lb.Name == metricNameLabel {
			return lb.Value
		}
	}
	return ""
}

func TestFilterClearsDroppedSeries(t *testing.T) {
	t.Parallel()
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		series(labels("__name__", "good"), 1),
		series(labels("job", "bad"), 1),
	}}
	backing := req.Timeseries[:2]
	testLimits.Filter(req, filterNow)
	if len(req.Timeseries) != 1 {
		t.Fatalf("%d series kept, want 1", len(req.Timeseries))
	}
	if backing[1].Labels != nil || backing[1].Samples != nil {
		t.Errorf("dropped series still reachable from the backing array: %+v", backing[1])
	}
}

func TestFilterReasonOfHostileSeriesIsShort(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("x", 1<<20)
	var ls []prompb.Label
	ls = append(ls, prompb.Label{Name: metricNameLabel, Value: "up"})
	for i := range 40 {
		ls = append(ls, prompb.Label{Name: "l" + strings.Repeat("a", i), Value: huge})
	}
	limits := Limits{MaxLabelsPerSeries: 10, MaxLabelNameLength: 100, MaxLabelValueLength: 100}
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{series(ls, 1)}}
	_, first := limits.Filter(req, filterNow)
	if first == nil {
		t.Fatal("Filter() = nil, want a problem")
	}
	if len(first.Reason) > 1024 {
		t.Errorf("reason of %d bytes, want at most 1 KiB: %.200q…", len(first.Reason), first.Reason)
	}
}

func TestFormatLabels(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ls   []prompb.Label
		want string
	}{
		{name: "should render no labels as braces", want: "{}"},
		{
			name: "should render labels as PromQL does",
			ls:   labels("__name__", "up", "job", "node"),
			want: `{__name__="up", job="node"}`,
		},
		{
			name: "should quote values with quotes and newlines",
			ls:   labels("__name__", "up", "msg", "a\"b\nc"),
			want: `{__name__="up", msg="a\"b\nc"}`,
		},
		{
			name: "should cut a long value at 64 bytes",
			ls:   labels("__name__", "up", "v", strings.Repeat("y", 100)),
			want: `{__name__="up", v="` + strings.Repeat("y", 64) + `…"}`,
		},
		{
			name: "should cut a long value on a rune boundary",
			ls:   labels("v", strings.Repeat("é", 40)),
			want: `{v="` + strings.Repeat("é", 32) + `…"}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := FormatLabels(tc.ls); got != tc.want {
				t.Errorf("FormatLabels() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFormatLabelsOfHostileSeries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ls   []prompb.Label
	}{
		{name: "should bound one huge value", ls: labels("__name__", "up", "v", strings.Repeat("x", 4<<20))},
		{name: "should bound one huge name", ls: labels(strings.Repeat("n", 4<<20), "x")},
		{name: "should bound invalid UTF-8", ls: labels("v", strings.Repeat("\xff", 1<<20))},
		{name: "should bound continuation bytes only", ls: labels("v", strings.Repeat("\x80", 1<<20))},
		{name: "should bound many labels", ls: func() []prompb.Label {
			var ls []prompb.Label
			for range 10000 {
				ls = append(ls, prompb.Label{Name: strings.Repeat("n", 100), Value: strings.Repeat("v", 100)})
			}
			return ls
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := FormatLabels(tc.ls)
			// 256 bytes, then at most one more label of two 64-byte
			// halves, quoted (an invalid byte quotes as 4), and the tail.
			if len(got) > 256+64+4*64+16 {
				t.Errorf("FormatLabels() of %d bytes: %.120q…", len(got), got)
			}
			if !utf8.ValidString(got) {
				t.Errorf("FormatLabels() = %q is not valid UTF-8", got)
			}
		})
	}
}

// fuzzLimits are the limits FuzzFilter checks against, with the default
// name rule, UTF-8 (the zero NameValidation).
var fuzzLimits = Limits{
	MaxLabelsPerSeries:  8,
	MaxLabelNameLength:  32,
	MaxLabelValueLength: 64,
	CreationGracePeriod: time.Minute,
}

func FuzzFilter(f *testing.F) {
	seeds := []*prompb.WriteRequest{
		{},
		loadgen.Shape{Series: 3, StartMs: goodTs, StepMs: 1000}.Request("tenant-1", 0),
		{Timeseries: []prompb.TimeSeries{
			series(labels("__name__", "up", "job", "a", "job", "b"), 1),
			series(labels("__name__", "up", "__name__", "up"), 1),
			series(labels("job", "x"), 1),
			series(labels("__name__", "1bad", "a-b", "\xff"), 1),
			{
				Labels:     labels("__name__", "h"),
				Samples:    []prompb.Sample{{Timestamp: -1}, {Timestamp: futureTs}, {Timestamp: goodTs}},
				Histograms: []prompb.Histogram{{Timestamp: futureTs, Count: &prompb.Histogram_CountFloat{CountFloat: 2}}},
				Exemplars:  []prompb.Exemplar{{Labels: labels("trace_id", "x"), Timestamp: -9}},
			},
		}},
		{Timeseries: []prompb.TimeSeries{series(labels("__name__", strings.Repeat("m", 100), strings.Repeat("n", 40), strings.Repeat("é", 40)), 1)}},
	}
	for _, req := range seeds {
		b, err := req.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req prompb.WriteRequest
		if err := req.Unmarshal(data); err != nil {
			t.Skip()
		}
		total := Count(&req)
		fuzzLimits := fuzzLimits
		if len(data)%2 == 1 {
			fuzzLimits.NameValidation = model.LegacyValidation
		}
		rejected, first := fuzzLimits.Filter(&req, filterNow)
		kept := Count(&req)
		if kept+rejected != total {
			t.Fatalf("%d kept + %d rejected, want the request's %d", kept, rejected, total)
		}
		if rejected > 0 && first == nil {
			t.Fatalf("%d rejected without a reason", rejected)
		}
		if first != nil && len(first.Reason) > 2048 {
			t.Fatalf("reason of %d bytes", len(first.Reason))
		}
		maxTs := filterNow.Add(fuzzLimits.CreationGracePeriod).UnixMilli()
		for _, ts := range req.Timeseries {
			if reason := fuzzLimits.checkLabels(ts.Labels); reason != "" {
				t.Fatalf("kept series %s: %s", FormatLabels(ts.Labels), reason)
			}
			for _, s := range ts.Samples {
				checkTimestamp(t, s.Timestamp, maxTs)
			}
			for _, h := range ts.Histograms {
				checkTimestamp(t, h.Timestamp, maxTs)
			}
			for _, e := range ts.Exemplars {
				checkTimestamp(t, e.Timestamp, maxTs)
			}
		}
		// What Filter keeps passes Filter.
		if again, problem := fuzzLimits.Filter(&req, filterNow); again != 0 || problem != nil {
			t.Fatalf("second Filter rejected %d: %v", again, problem)
		}
	})
}

func checkTimestamp(t *testing.T, ts, maxTs int64) {
	t.Helper()
	if ts < 0 || ts > maxTs {
		t.Fatalf("kept timestamp %d outside [0, %d]", ts, maxTs)
	}
}

// Count is the samples, histograms and exemplars of req (backend.Count).
func Count(req *prompb.WriteRequest) int64 {
	var n int64
	for i := range req.Timeseries {
		n += seriesSamples(&req.Timeseries[i])
	}
	return n
}
