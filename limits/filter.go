package limits

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/common/model"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/proto/wire"
)

// metricNameLabel is the label that holds a series' metric name.
const metricNameLabel = "__name__"

// Violation is the first rule a request broke: Filter removed what broke
// it, and the rest of the request can be applied. The pusher answers it
// CLIENT_ERROR, the gateway 400.
type Violation struct {
	// Rule names the rule broken, as metrics and tests name it:
	// "invalid_labels", "sample_time", "invalid_histogram",
	// "exemplar_without_sample", "exemplar_labels_too_long",
	// "exemplar_invalid", "metadata".
	Rule string
	// Reason says what was wrong and where, for the client.
	Reason string
}

// Error returns the reason.
func (v *Violation) Error() string { return v.Reason }

// The rules a Violation names.
const (
	RuleLabels            = "invalid_labels"
	RuleSampleTime        = "sample_time"
	RuleHistogram         = "invalid_histogram"
	RuleExemplarNoSample  = "exemplar_without_sample"
	RuleExemplarLabelsLen = "exemplar_labels_too_long"
	RuleExemplarLabels    = "exemplar_invalid"
	RuleMetadata          = "metadata"
)

// Filter applies the storage-free checks to req in place. Series with bad
// labels, samples too far in the future or the past, inconsistent native
// histograms, exemplars the TSDB would refuse and metadata over its bounds
// are removed, so the valid rest of the request can still be applied; the
// first problem found is returned together with the number of samples,
// histograms and exemplars removed. req is modified.
//
// Both doors call it: the gateway before producing, the pusher before
// applying. A request Filter leaves whole is one no rule of the pusher's
// refuses without looking at what is stored.
func (l Limits) Filter(req *prompb.WriteRequest, now time.Time) (rejected int64, first *Violation) {
	note := func(rule, reason string, ls []prompb.Label) {
		if first == nil {
			first = &Violation{Rule: rule, Reason: fmt.Sprintf("%s for series %s", reason, FormatLabels(ls))}
		}
	}
	minTs, maxTs := l.TimeBounds(now)
	kept := req.Timeseries[:0]
	for i := range req.Timeseries {
		ts := req.Timeseries[i]
		if reason := l.checkLabels(ts.Labels); reason != "" {
			rejected += seriesSamples(&ts)
			note(RuleLabels, reason, ts.Labels)
			continue
		}
		if n, reason := filterTimestamps(&ts, minTs, maxTs); n > 0 {
			rejected += n
			note(RuleSampleTime, reason, ts.Labels)
		}
		if n, reason := filterHistograms(&ts); n > 0 {
			rejected += n
			note(RuleHistogram, reason, ts.Labels)
		}
		if n, rule, reason := filterExemplars(&ts); n > 0 {
			rejected += n
			note(rule, reason, ts.Labels)
		}
		kept = append(kept, ts)
	}
	// Clear the tail so dropped series do not stay reachable.
	clear(req.Timeseries[len(kept):])
	req.Timeseries = kept
	if reason := l.filterMetadata(req); reason != "" && first == nil {
		first = &Violation{Rule: RuleMetadata, Reason: reason}
	}
	return rejected, first
}

func seriesSamples(ts *prompb.TimeSeries) int64 {
	return int64(len(ts.Samples) + len(ts.Histograms) + len(ts.Exemplars))
}

// checkLabels returns why a series' labels are invalid, or "". The labels
// are checked in order and the first problem is the answer, so a request's
// error names the same label however the checks below are implemented.
func (l Limits) checkLabels(ls []prompb.Label) string {
	if len(ls) > l.MaxLabelsPerSeries {
		return fmt.Sprintf("series has %d labels, more than the limit of %d", len(ls), l.MaxLabelsPerSeries)
	}
	scheme := l.NameScheme()
	hasName := false
	// sorted says that the names before label i are in strictly increasing
	// order, as Prometheus sends them: then label i duplicates an earlier
	// name only if it equals the one just before it. One comparison per
	// label instead of one per pair of labels, which was most of this
	// function's time on a remote-write request. The first name out of
	// order turns the pairwise check on for the rest of the series.
	sorted := true
	for i := range ls {
		lb := &ls[i]
		// Before the metric name branch: a second __name__ is a duplicate too.
		// Adjacent names of a sorted series mostly differ in their first
		// byte, which orders them without a call to strings.Compare.
		if i > 0 && sorted {
			if prev := ls[i-1].Name; prev == "" || lb.Name == "" || prev[0] >= lb.Name[0] {
				switch c := strings.Compare(prev, lb.Name); {
				case c == 0:
					return fmt.Sprintf("duplicate label name %q", lb.Name)
				case c > 0:
					sorted = false
				}
			}
		}
		if !sorted && hasLabelName(ls[:i], lb.Name) {
			return fmt.Sprintf("duplicate label name %q", lb.Name)
		}
		if lb.Name == metricNameLabel {
			// The metric name is a label value and has the same limit.
			if len(lb.Value) > l.MaxLabelValueLength {
				return fmt.Sprintf("value of label %q has %d bytes, more than the limit of %d", lb.Name, len(lb.Value), l.MaxLabelValueLength)
			}
			if !validMetricName(scheme, lb.Value) {
				return fmt.Sprintf("invalid metric name %q%s", truncate(lb.Value), nameRule(scheme, lb.Value, true))
			}
			hasName = true
			continue
		}
		if len(lb.Name) > l.MaxLabelNameLength {
			return fmt.Sprintf("label name of %d bytes is longer than the limit of %d", len(lb.Name), l.MaxLabelNameLength)
		}
		if !validLabelName(scheme, lb.Name) {
			return fmt.Sprintf("invalid label name %q%s", truncate(lb.Name), nameRule(scheme, lb.Name, false))
		}
		if len(lb.Value) > l.MaxLabelValueLength {
			return fmt.Sprintf("value of label %q has %d bytes, more than the limit of %d", lb.Name, len(lb.Value), l.MaxLabelValueLength)
		}
		if !wire.ValidUTF8(lb.Value) {
			return fmt.Sprintf("value of label %q is not valid UTF-8", lb.Name)
		}
	}
	if !hasName {
		return "missing metric name"
	}
	return ""
}

// validLabelName is scheme.IsValidLabelName, Prometheus' own rule, with
// fast paths that TestNameChecksAnswerAsPrometheusSchemes holds to it: a
// classic name (wire's table) is valid under both schemes and is nearly
// every name; under UTF-8 the rest is wire.ValidUTF8, which
// utf8.ValidString (the scheme's check) was three times slower than on
// names of a dozen bytes, a third of Filter's time on OpenTelemetry's.
func validLabelName(scheme model.ValidationScheme, s string) bool {
	switch {
	case wire.ValidLabelName(s):
		return true
	case scheme == model.UTF8Validation:
		return s != "" && wire.ValidUTF8(s)
	}
	return scheme.IsValidLabelName(s)
}

// validMetricName is scheme.IsValidMetricName with validLabelName's fast
// paths.
func validMetricName(scheme model.ValidationScheme, s string) bool {
	switch {
	case wire.ValidMetricName(s):
		return true
	case scheme == model.UTF8Validation:
		return s != "" && wire.ValidUTF8(s)
	}
	return scheme.IsValidMetricName(s)
}

// nameRule says which rule an invalid name broke, for the client: under
// legacy, a name that UTF-8 would take is told the flag that refuses it
// and the names it takes.
func nameRule(scheme model.ValidationScheme, name string, metric bool) string {
	switch {
	case name == "":
		return " (empty)"
	case !utf8.ValidString(name):
		return " (not valid UTF-8)"
	case scheme != model.LegacyValidation:
		return ""
	case metric:
		return " (-limits.name-validation-scheme=legacy: [a-zA-Z_:][a-zA-Z0-9_:]*)"
	}
	return " (-limits.name-validation-scheme=legacy: [a-zA-Z_][a-zA-Z0-9_]*)"
}

// hasLabelName reports whether one of ls is named name.
func hasLabelName(ls []prompb.Label, name string) bool {
	for i := range ls {
		if ls[i].Name == name {
			return true
		}
	}
	return false
}

// filterTimestamps drops samples, histograms and exemplars whose timestamp
// is after maxTs or before minTs (never before the Unix epoch), and says why
// for the first one.
func filterTimestamps(ts *prompb.TimeSeries, minTs, maxTs int64) (dropped int64, reason string) {
	bad := func(t int64) bool {
		if t > maxTs || t < minTs {
			if reason == "" {
				reason = timestampReason(t, minTs, maxTs)
			}
			dropped++
			return true
		}
		return false
	}
	ts.Samples = filterSlice(ts.Samples, func(s prompb.Sample) bool { return bad(s.Timestamp) })
	ts.Histograms = filterSlice(ts.Histograms, func(h prompb.Histogram) bool { return bad(h.Timestamp) })
	ts.Exemplars = filterSlice(ts.Exemplars, func(e prompb.Exemplar) bool { return bad(e.Timestamp) })
	return dropped, reason
}

func timestampReason(t, minTs, maxTs int64) string {
	if t < 0 {
		return fmt.Sprintf("timestamp %d is before 1970", t)
	}
	if t < minTs {
		return fmt.Sprintf("timestamp %s is too far in the past (before %s, -limits.past-grace-period)",
			time.UnixMilli(t).UTC().Format(time.RFC3339), time.UnixMilli(minTs).UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("timestamp %s is too far in the future (after %s)",
		time.UnixMilli(t).UTC().Format(time.RFC3339), time.UnixMilli(maxTs).UTC().Format(time.RFC3339))
}

// filterSlice removes, in place, the elements drop returns true for.
func filterSlice[T any](s []T, drop func(T) bool) []T {
	out := s[:0]
	for _, v := range s {
		if !drop(v) {
			out = append(out, v)
		}
	}
	return out
}

// maxReasonLabels bounds the text a reason quotes from a hostile series.
const maxReasonLabels = 256

// FormatLabels renders labels as PromQL does, {a="b", "service.name"="d"}
// (a name other than a classic one quoted, as Prometheus 3 writes it), cut
// short for very long series so a hostile request cannot make a huge log
// line.
func FormatLabels(ls []prompb.Label) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, lb := range ls {
		if i > 0 {
			b.WriteString(", ")
		}
		if wire.ValidLabelName(lb.Name) {
			b.WriteString(truncate(lb.Name))
		} else {
			b.WriteString(strconv.Quote(truncate(lb.Name)))
		}
		b.WriteByte('=')
		b.WriteString(strconv.Quote(truncate(lb.Value)))
		if b.Len() > maxReasonLabels {
			b.WriteString(", …")
			break
		}
	}
	b.WriteByte('}')
	return b.String()
}

// truncate shortens s to at most 64 bytes on a rune boundary.
func truncate(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
