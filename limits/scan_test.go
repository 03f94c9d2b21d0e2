package limits

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/proto/wire"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// The gateway forwards a request without decoding it when wire.Decoder.Scan,
// given LabelRules, accepts it and its times are within TimeBounds: it then
// takes Filter's answer to be "nothing wrong". The tests below hold Scan to
// that, rule by rule and on fuzzed requests.

// scanPasses is the gateway's fast-path test: Scan accepts b and every
// sample is within l's bounds at filterNow.
func scanPasses(l Limits, b []byte) (wire.Summary, bool) {
	var d wire.Decoder
	sum, ok := d.Scan(b, l.LabelRules())
	if !ok {
		return sum, false
	}
	minTs, maxTs := l.TimeBounds(filterNow)
	return sum, sum.Samples == 0 || (sum.MinTime >= minTs && sum.MaxTime <= maxTs)
}

// filterPasses decodes b and reports whether Filter finds nothing wrong
// with it, as the gateway's path without Scan decides.
func filterPasses(t *testing.T, l Limits, b []byte) (req prompb.WriteRequest, ok bool) {
	t.Helper()
	var d wire.Decoder
	if err := d.Decode(b, &req); err != nil {
		return req, false
	}
	n, first := l.Filter(&req, filterNow)
	return req, n == 0 && first == nil
}

// checkScan fails t when Scan vouches for b but Filter finds something
// wrong with it (or Decode refuses it), when their counts differ, or, when
// exact, when Scan declines a request Filter passes.
func checkScan(t *testing.T, l Limits, b []byte, exact bool) {
	t.Helper()
	sum, fast := scanPasses(l, b)
	req, slow := filterPasses(t, l, b)
	switch {
	case fast && !slow:
		t.Fatalf("Scan passed a request that Decode and Filter do not: %x", b)
	case exact && slow && !fast:
		t.Fatalf("Scan declined a request that Filter passes: %x", b)
	case fast:
		if c := backend.Count(&req); sum.Series != len(req.Timeseries) || int64(sum.Samples) != c {
			t.Fatalf("Scan counted %d series and %d samples, Decode %d and %d", sum.Series, sum.Samples, len(req.Timeseries), c)
		}
		lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
		for _, ts := range req.Timeseries {
			for _, s := range ts.Samples {
				lo, hi = min(lo, s.Timestamp), max(hi, s.Timestamp)
			}
		}
		if sum.MinTime != lo || sum.MaxTime != hi {
			t.Fatalf("Scan found times %d to %d, Decode %d to %d", sum.MinTime, sum.MaxTime, lo, hi)
		}
		if err := wire.ValidateWriteRequest(b); err != nil {
			t.Fatalf("Scan passed a request the consumer refuses: %v", err)
		}
	}
}

// utf8Limits are testLimits under the UTF-8 name rule.
var utf8Limits = func() Limits {
	l := testLimits
	l.NameValidation = model.UTF8Validation
	return l
}()

func TestScanAnswersAsFilterRuleByRule(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("a", n) }
	for _, tc := range []struct {
		name   string
		labels []string
		ts     int64
		// declined: Filter passes the series but Scan leaves it to Filter.
		declined bool
	}{
		{name: "valid", labels: []string{"__name__", "up", "job", "node"}},
		{name: "metric name only", labels: []string{"__name__", "up"}},
		{name: "colon in metric name", labels: []string{"__name__", "job:up:sum", "job", "node"}},
		{name: "empty value", labels: []string{"__name__", "up", "job", ""}},
		{name: "names of every length", labels: []string{"__name__", "up", "a", "1", "ab", "2", "abcdefgh", "3", "abcdefghi", "4"}},
		{name: "UTF-8 value", labels: []string{"__name__", "up", "city", "zürich-süd-日本"}},
		{name: "name at its limit", labels: []string{"__name__", "up", long(testLimits.MaxLabelNameLength), "x"}},
		{name: "value at its limit", labels: []string{"__name__", "up", "job", long(testLimits.MaxLabelValueLength)}},
		{name: "metric name at its limit", labels: []string{"__name__", "m" + long(testLimits.MaxLabelValueLength-1)}},
		{name: "labels at their limit", labels: []string{"__name__", "up", "a", "1", "b", "2", "c", "3", "d", "4"}},
		{name: "unsorted", labels: []string{"job", "node", "__name__", "up"}, declined: true},
		{name: "unsorted in the first byte only", labels: []string{"__name__", "up", "b", "1", "ab", "2"}, declined: true},
		{name: "duplicate name", labels: []string{"__name__", "up", "job", "a", "job", "b"}},
		{name: "duplicate metric name", labels: []string{"__name__", "up", "__name__", "up"}},
		{name: "duplicate name, unsorted", labels: []string{"job", "a", "__name__", "up", "job", "b"}},
		{name: "names equal in the first byte", labels: []string{"__name__", "up", "job", "a", "jobs", "b"}},
		{name: "missing metric name", labels: []string{"job", "node"}},
		{name: "empty metric name", labels: []string{"__name__", "", "job", "node"}},
		{name: "metric name starting with a digit", labels: []string{"__name__", "1up"}},
		{name: "metric name with a dash", labels: []string{"__name__", "u-p"}},
		{name: "metric name with a dash after eight bytes", labels: []string{"__name__", "abcdefghij-k"}},
		{name: "metric name over its limit", labels: []string{"__name__", "m" + long(testLimits.MaxLabelValueLength)}},
		{name: "metric name not ASCII", labels: []string{"__name__", "üp"}},
		{name: "empty label name", labels: []string{"__name__", "up", "", "x"}},
		{name: "label name starting with a digit", labels: []string{"__name__", "up", "1job", "x"}},
		{name: "label name with a colon", labels: []string{"__name__", "up", "jo:b", "x"}},
		{name: "label name with a dash", labels: []string{"__name__", "up", "jo-b", "x"}},
		{name: "label name with a dot after eight bytes", labels: []string{"__name__", "up", "abcdefghi.j", "x"}},
		{name: "label name with a dash in its sixteenth byte", labels: []string{"__name__", "up", "abcdefghijklmno-", "x"}},
		{name: "label name with a dash in its ninth byte", labels: []string{"__name__", "up", "abcdefgh-", "x"}},
		{name: "label name of sixteen bytes", labels: []string{"__name__", "up", "abcdefghijklmnop", "x"}},
		{name: "label name with a high byte", labels: []string{"__name__", "up", "jo\xc3\xa9", "x"}},
		{name: "dotted metric and label names", labels: []string{"__name__", "http.server.request.duration", "service.name", "api"}},
		{name: "spaced metric and label names", labels: []string{"__name__", "request count", "a b", "x", "zone name", "y"}},
		{name: "metric name not UTF-8", labels: []string{"__name__", "up\xff"}},
		{name: "label name not UTF-8", labels: []string{"__name__", "up", "jo\xffb", "x"}},
		{name: "label name with a truncated rune after eight bytes", labels: []string{"__name__", "up", "abcdefgh\xc3", "x"}},
		{name: "label name over its limit", labels: []string{"__name__", "up", long(testLimits.MaxLabelNameLength + 1), "x"}},
		{name: "value over its limit", labels: []string{"__name__", "up", "job", long(testLimits.MaxLabelValueLength + 1)}},
		{name: "value not UTF-8", labels: []string{"__name__", "up", "job", "no\xffde"}},
		{name: "value with a truncated rune", labels: []string{"__name__", "up", "job", "zür\xc3"}},
		{name: "too many labels", labels: []string{"__name__", "up", "a", "1", "b", "2", "c", "3", "d", "4", "e", "5"}},
		{name: "timestamp before 1970", labels: []string{"__name__", "up"}, ts: -1},
		{name: "timestamp too far in the future", labels: []string{"__name__", "up"}, ts: futureTs},
		{name: "timestamp zero", labels: []string{"__name__", "up"}, ts: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ts := goodTs
			if tc.ts != 0 || tc.name == "timestamp zero" {
				ts = tc.ts
			}
			req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
				series(labels("__name__", "before", "job", "x"), 1),
				{Labels: labels(tc.labels...), Samples: []prompb.Sample{{Value: 2, Timestamp: ts}}},
				series(labels("__name__", "after", "job", "x"), 3),
			}}
			b, err := req.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			// Scan leaves names out of order to Filter.
			sorted := slices.IsSortedFunc(req.Timeseries[1].Labels, func(a, b prompb.Label) int { return strings.Compare(a.Name, b.Name) })
			for _, l := range []Limits{testLimits, utf8Limits} {
				checkScan(t, l, b, !tc.declined && sorted)
				if _, fast := scanPasses(l, b); tc.declined && fast {
					t.Fatalf("%s: Scan passed a series it should leave to Filter", l.NameScheme())
				}
			}
		})
	}
}

// TestScanWithPastGracePeriod checks the earliest bound, which only
// -limits.past-grace-period sets.
func TestScanWithPastGracePeriod(t *testing.T) {
	t.Parallel()
	l := testLimits
	l.PastGracePeriod = time.Hour
	for _, ts := range []int64{goodTs, filterNow.Add(-2 * time.Hour).UnixMilli()} {
		req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
			{Labels: labels("__name__", "up"), Samples: []prompb.Sample{{Value: 1, Timestamp: ts}}},
		}}
		b, err := req.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		checkScan(t, l, b, true)
	}
}

// FuzzScanLabels builds canonical requests of fuzzed label names and
// values, where Scan must answer exactly as Filter does (but for names out
// of order, which it leaves to Filter).
func FuzzScanLabels(f *testing.F) {
	f.Add("__name__\x00up\x00job\x00node", int64(0))
	f.Add("__name__\x00up\x00job\x00a\x00job\x00b", int64(0))
	f.Add("__name__\x001up\x00a-b\x00\xff", int64(-1))
	f.Add("__name__\x00zürich\x00city\x00zürich", int64(1))
	f.Add("__name__\x00http.server.request.duration\x00service.name\x00api", int64(2))
	f.Fuzz(func(t *testing.T, text string, dt int64) {
		parts := strings.Split(text, "\x00")
		if len(parts)%2 == 1 {
			parts = append(parts, "")
		}
		ls := labels(parts...)
		sorted := true
		for i := 1; i < len(ls); i++ {
			sorted = sorted && ls[i-1].Name < ls[i].Name
		}
		req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
			{Labels: ls, Samples: []prompb.Sample{{Value: 1, Timestamp: goodTs + dt%(int64(time.Hour/time.Millisecond))}}},
		}}
		b, err := req.Marshal()
		if err != nil {
			t.Skip()
		}
		for _, l := range nameSchemes() {
			checkScan(t, l, b, sorted)
		}
	})
}

// FuzzScan feeds arbitrary bytes to Scan: whatever it vouches for, Decode
// must accept and Filter must find nothing wrong with.
func FuzzScan(f *testing.F) {
	for _, req := range []*prompb.WriteRequest{
		{Timeseries: []prompb.TimeSeries{series(labels("__name__", "up", "job", "node"), 1, 2)}},
		{Timeseries: []prompb.TimeSeries{series(labels("__name__", "up"), 0), {Labels: labels("__name__", "down")}}},
	} {
		b, err := req.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, l := range nameSchemes() {
			checkScan(t, l, b, false)
		}
	})
}
