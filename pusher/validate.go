package pusher

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// metricNameLabel is the label that holds a series' metric name.
const metricNameLabel = "__name__"

// Filter applies the storage-free checks to req in place. Series with bad
// labels and samples too far in the future are removed, so the valid rest of
// the request can still be applied; the first problem found is returned as a
// ClientError together with the number of samples removed. req is modified.
func (l Limits) Filter(req *prompb.WriteRequest, now time.Time) (rejected int64, first *ClientError) {
	maxTs := now.Add(l.CreationGracePeriod).UnixMilli()
	minTs := int64(0) // before 1970 is never valid
	if l.PastGracePeriod > 0 {
		minTs = max(minTs, now.Add(-l.PastGracePeriod).UnixMilli())
	}
	kept := req.Timeseries[:0]
	for i := range req.Timeseries {
		ts := req.Timeseries[i]
		if reason := l.checkLabels(ts.Labels); reason != "" {
			rejected += seriesSamples(&ts)
			if first == nil {
				first = NewClientError("%s for series %s", reason, FormatLabels(ts.Labels))
			}
			continue
		}
		n, reason := filterTimestamps(&ts, minTs, maxTs)
		if n > 0 {
			rejected += n
			if first == nil {
				first = NewClientError("%s for series %s", reason, FormatLabels(ts.Labels))
			}
		}
		kept = append(kept, ts)
	}
	// Clear the tail so dropped series do not stay reachable.
	clear(req.Timeseries[len(kept):])
	req.Timeseries = kept
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
			if !validMetricName(lb.Value) {
				return fmt.Sprintf("invalid metric name %q", truncate(lb.Value))
			}
			hasName = true
			continue
		}
		if len(lb.Name) > l.MaxLabelNameLength {
			return fmt.Sprintf("label name of %d bytes is longer than the limit of %d", len(lb.Name), l.MaxLabelNameLength)
		}
		if !validLabelName(lb.Name) {
			return fmt.Sprintf("invalid label name %q", truncate(lb.Name))
		}
		if len(lb.Value) > l.MaxLabelValueLength {
			return fmt.Sprintf("value of label %q has %d bytes, more than the limit of %d", lb.Name, len(lb.Value), l.MaxLabelValueLength)
		}
		if !validUTF8(lb.Value) {
			return fmt.Sprintf("value of label %q is not valid UTF-8", lb.Name)
		}
	}
	if !hasName {
		return "missing metric name"
	}
	return ""
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

// asciiMask has the high bit of each byte of a word: a word of ASCII
// bytes has none of them.
const asciiMask = 0x8080808080808080

// validUTF8 is utf8.ValidString with a fast path for ASCII, which nearly
// every label value is. utf8.ValidString reads eight ASCII bytes at a time
// too, but the rest of a value, most of a value of a dozen bytes, one at a
// time; here the last word overlaps the one before (a value of 4 to 7
// bytes is two overlapping 4-byte words), so no value of 4 bytes or more
// is read byte by byte. utf8.ValidString decodes a value with a byte of
// 0x80 or more.
func validUTF8(s string) bool {
	n := len(s)
	switch {
	case n >= 8:
		for i := 0; i < n-8; i += 8 {
			if word64(s, i)&asciiMask != 0 {
				return utf8.ValidString(s)
			}
		}
		if word64(s, n-8)&asciiMask != 0 {
			return utf8.ValidString(s)
		}
	case n >= 4:
		if (word32(s, 0)|word32(s, n-4))&asciiMask != 0 {
			return utf8.ValidString(s)
		}
	default:
		for i := range n {
			if s[i] >= utf8.RuneSelf {
				return utf8.ValidString(s)
			}
		}
	}
	return true
}

// word64 is the 8 bytes of s at i as a little-endian word, which the
// compiler reads with one load.
func word64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// word32 is the 4 bytes of s at i as a little-endian word.
func word32(s string, i int) uint64 {
	s = s[i : i+4]
	return uint64(uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24)
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

// Classes of the bytes of label and metric names, as bits of nameClass.
const (
	labelNameStart  = 1 << iota // may start a label name: [a-zA-Z_]
	labelNameByte               // may follow: [a-zA-Z0-9_]
	metricNameStart             // may start a metric name: [a-zA-Z_:]
	metricNameByte              // may follow: [a-zA-Z0-9_:]
)

// nameClass classifies every byte for the name rules below: one table
// load per byte where the rules spelt as comparisons took several
// branches, which showed in the checks of every label of every series.
var nameClass = func() (t [256]uint8) {
	for c := range 256 {
		letter := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		digit := c >= '0' && c <= '9'
		if letter {
			t[c] |= labelNameStart | labelNameByte | metricNameStart | metricNameByte
		}
		if digit {
			t[c] |= labelNameByte | metricNameByte
		}
		if c == ':' {
			t[c] |= metricNameStart | metricNameByte
		}
	}
	return t
}()

// validLabelName implements Prometheus' classic rule, [a-zA-Z_][a-zA-Z0-9_]*.
// Ferry keeps the classic rule because PromQL selectors on UTF-8 names need
// quoting that most dashboards do not use yet.
func validLabelName(s string) bool {
	return validName(s, labelNameStart, labelNameByte)
}

// validMetricName implements [a-zA-Z_:][a-zA-Z0-9_:]*.
func validMetricName(s string) bool {
	return validName(s, metricNameStart, metricNameByte)
}

// validName reports whether s is a first byte of class start followed by
// bytes of class rest.
func validName(s string, start, rest uint8) bool {
	if s == "" || nameClass[s[0]]&start == 0 {
		return false
	}
	for i := 1; i < len(s); i++ {
		if nameClass[s[i]]&rest == 0 {
			return false
		}
	}
	return true
}

// maxReasonLabels bounds the text a reason quotes from a hostile series.
const maxReasonLabels = 256

// FormatLabels renders labels as PromQL does, {a="b", c="d"}, cut short for
// very long series so a hostile request cannot make a huge log line.
func FormatLabels(ls []prompb.Label) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, lb := range ls {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(truncate(lb.Name))
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
