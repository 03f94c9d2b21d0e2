package wire

import (
	"encoding/binary"
	"math"

	"github.com/prometheus/common/model"
)

// Scan is the gateway's single pass over a remote-write 1.0 request in
// the shape Prometheus writes (issue 13). Decoding a request and then
// checking its labels read its label bytes twice, the second time from
// far caches (a 2,000-series request has about 1 MB of labels and decoded
// label structs, more than a core's L2), and the decoded request itself
// was written only to be checked: when every series passes, the gateway
// forwards the client's bytes and needs no more than the counts of the
// request. Scan checks each label as it reads it and builds nothing.
//
// It accepts only that one shape, and declines anything else (declining
// is not refusing): the caller then decodes and checks the request as
// before, which has the last word and says what is wrong.

// LabelRules are the label checks of limits.Limits.Filter, as Scan
// applies them.
type LabelRules struct {
	// MaxLabelsPerSeries is the most labels a series may have.
	MaxLabelsPerSeries int
	// MaxLabelNameLength is the longest label name, in bytes; __name__ is
	// not held to it.
	MaxLabelNameLength int
	// MaxLabelValueLength is the longest label value, and metric name, in
	// bytes.
	MaxLabelValueLength int
	// NameValidation is the rule for metric and label names: under
	// model.LegacyValidation the classic names only, under any other
	// value the scheme model.UTF8Validation checks, any non-empty valid
	// UTF-8.
	NameValidation model.ValidationScheme
}

// Summary is what Scan found in a request it accepted.
type Summary struct {
	// Series and Samples count the request's series and their samples.
	Series, Samples int
	// MinTime and MaxTime are the earliest and latest sample timestamps,
	// in milliseconds; MinTime > MaxTime when there is no sample.
	MinTime, MaxTime int64
}

// Scan reports whether b is a request that Decode accepts and whose every
// series passes rules, without decoding it: a WriteRequest of series only
// (no metadata, no unknown field), each series of labels and samples only
// (no exemplar, no histogram), fields with lengths of one byte (labels,
// samples) or up to two (series), each label its name then its value,
// label names in increasing order, and within d.Limits. For such a request the pusher's
// Limits.Filter, applied to what Decode builds, changes nothing if every
// timestamp is within its bounds: the caller checks sum's times against
// them. ok false says nothing about b but that Scan does not vouch for it.
//
// Scan uses only d.Limits: it may run before or instead of Decode, and
// leaves what the last Decode built as it was.
func (d *Decoder) Scan(b []byte, rules LabelRules) (sum Summary, ok bool) {
	sum.MinTime, sum.MaxTime = math.MaxInt64, math.MinInt64
	size, labels := len(b), 0
	for len(b) > 0 {
		v, n := seriesBytes(b)
		if n == 0 {
			return sum, false
		}
		nl, ns, ok := rules.scanSeries(v, &sum)
		if !ok {
			return sum, false
		}
		if limit := d.Limits.MaxSamplesPerSeries; limit > 0 && ns > limit {
			return sum, false
		}
		sum.Series++
		sum.Samples += ns
		labels += nl
		b = b[n:]
	}
	if limit := d.Limits.MaxSeries; limit > 0 && sum.Series > limit {
		return sum, false
	}
	// Decode charges each element as it builds it and fails once the
	// charges pass the budget: with only series, labels and samples, that
	// is when their total does. The counts are bounded by len(b), so the
	// total cannot overflow.
	if e := d.Limits.MaxExpansion; e > 0 {
		cost := sum.Series*sizeSeries + labels*sizeLabel + sum.Samples*sizeSample
		if cost > e*size+expansionSlack {
			return sum, false
		}
	}
	return sum, true
}

// tagSeries and tagSample are the one-byte tags of a WriteRequest's series
// and a TimeSeries' samples.
const (
	tagSeries = 1<<3 | 2
	tagSample = 2<<3 | 2
)

// seriesBytes splits off b a series whose length takes one or two bytes
// (a series of 128 bytes to 16 KiB, as nearly all are): its content and
// the bytes it took, or n = 0 when b does not start with one.
func seriesBytes(b []byte) (v []byte, n int) {
	switch {
	case len(b) < 2 || b[0] != tagSeries:
	case b[1] < 0x80:
		l := int(b[1])
		if l > len(b)-2 {
			return nil, 0
		}
		return b[2 : 2+l], 2 + l
	case len(b) >= 3 && b[2] < 0x80:
		l := int(b[1]&0x7f) | int(b[2])<<7
		if l > len(b)-3 {
			return nil, 0
		}
		return b[3 : 3+l], 3 + l
	}
	return nil, 0
}

// scanSeries reads the TimeSeries b, checking each label as Filter's
// checkLabels does while it is read, and adding its samples' timestamps to
// sum. It returns the numbers of labels and samples; ok false declines the
// series.
//
// It walks b by index, and reads each label inline, as decodeLabel's fast
// path does: calls and slice updates per label were a third of its time.
func (r *LabelRules) scanSeries(b []byte, sum *Summary) (labels, samples int, ok bool) {
	var prev string
	hasName := false
	// Under UTF-8 a name is checked as a value is: not empty here, valid
	// UTF-8 with the values below.
	legacy := r.NameValidation == model.LegacyValidation
	// The labels before the first sample, as an encoder writes them, are
	// checked for valid UTF-8 at once: their tags and lengths are ASCII,
	// and so are their names under legacy, so the values (and names) are
	// valid when the whole span is ASCII; validValues checks them one by
	// one when it is not.
	span := -1
	for i := 0; i < len(b); {
		if len(b)-i < 2 || b[i+1] >= 0x80 || int(b[i+1]) > len(b)-i-2 {
			return 0, 0, false
		}
		next := i + 2 + int(b[i+1])
		switch b[i] {
		case tagLabel:
			// The name and then the value (left out when empty).
			ns := i + 4
			if next < ns || b[i+2] != tagLabelName || b[i+3] >= 0x80 || int(b[i+3]) > next-ns {
				return 0, 0, false
			}
			ne := ns + int(b[i+3])
			vs := ne
			if ne < next {
				if next-ne < 2 || b[ne] != tagLabelValue || int(b[ne+1]) != next-ne-2 {
					return 0, 0, false
				}
				vs = ne + 2
			}
			name := unsafeString(b[ns:ne])
			// Names in increasing order, as Prometheus sends them, are
			// distinct: one comparison with the name before, mostly of its
			// first byte. Out of order is declined; Filter then decides
			// whether a name repeats.
			if labels > 0 && (prev == "" || name == "" || prev[0] >= name[0]) && prev >= name {
				return 0, 0, false
			}
			if next-vs > r.MaxLabelValueLength {
				return 0, 0, false
			}
			if name == metricNameLabel {
				// The metric name is a label value and has the same limit;
				// under UTF-8 it is checked as a value is.
				if legacy {
					if !validNameAt(b, vs, next-vs, true) {
						return 0, 0, false
					}
				} else if vs == next || (span >= 0 && !ValidUTF8(unsafeString(b[vs:next]))) {
					return 0, 0, false
				}
				hasName = true
			} else if n := ne - ns; n > r.MaxLabelNameLength || (span >= 0 && !ValidUTF8(unsafeString(b[vs:next]))) {
				return 0, 0, false
			} else if !legacy {
				if n == 0 || (span >= 0 && !ValidUTF8(name)) {
					return 0, 0, false
				}
			} else if uint(n-1) < 8 && len(b)-ns >= 8 {
				// validNameAt's word, written out: the call was a tenth
				// of Scan's time. The bytes after the name are read but
				// not looked at.
				want := uint64(highBits) >> (64 - 8*n)
				if nameClass[b[ns]]&labelNameStart == 0 || nameBits(binary.LittleEndian.Uint64(b[ns:]), false)&want != want {
					return 0, 0, false
				}
			} else if uint(n-9) < 8 && len(b)-ns >= 16 {
				// Nine to sixteen bytes: two words, the second one's
				// bytes past the name not looked at.
				want := uint64(highBits) >> (128 - 8*n)
				if nameClass[b[ns]]&labelNameStart == 0 || nameBits(binary.LittleEndian.Uint64(b[ns:]), false) != highBits ||
					nameBits(binary.LittleEndian.Uint64(b[ns+8:]), false)&want != want {
					return 0, 0, false
				}
			} else if !validNameAt(b, ns, n, false) {
				return 0, 0, false
			}
			prev = name
			labels++
		case tagSample:
			if span < 0 {
				span = i
			}
			t, ok := sampleTime(b[i+2 : next])
			if !ok {
				return 0, 0, false
			}
			sum.MinTime, sum.MaxTime = min(sum.MinTime, t), max(sum.MaxTime, t)
			samples++
		default:
			return 0, 0, false
		}
		i = next
	}
	if span < 0 {
		span = len(b)
	}
	// A series without labels is refused by Decode and judged by Filter.
	if !hasName || labels > r.MaxLabelsPerSeries || !(isASCII(b[:span]) || validValues(b[:span], !legacy)) {
		return 0, 0, false
	}
	return labels, samples, true
}

// validValues reports whether the values of the labels b, which
// scanSeries read, and their names too when names, are valid UTF-8.
func validValues(b []byte, names bool) bool {
	for i := 0; i < len(b); {
		next := i + 2 + int(b[i+1])
		ne := i + 4 + int(b[i+3])
		if ne < next && !ValidUTF8(unsafeString(b[ne+2:next])) {
			return false
		}
		if names && !ValidUTF8(unsafeString(b[i+4:ne])) {
			return false
		}
		i = next
	}
	return true
}

// metricNameLabel is the label that holds a series' metric name.
const metricNameLabel = "__name__"

// sampleTime returns the timestamp of the Sample b when it is its value
// (left out when zero) and then its timestamp (left out when zero), each
// once, as every encoder writes a sample; ok false otherwise.
func sampleTime(b []byte) (t int64, ok bool) {
	if len(b) >= 9 && b[0] == tagSampleVal {
		b = b[9:]
	}
	if len(b) == 0 {
		return 0, true
	}
	if b[0] != tagSampleTime {
		return 0, false
	}
	x, n, err := consumeVarint(b[1:])
	if err != nil || 1+n != len(b) {
		return 0, false
	}
	return int64(x), true //nolint:gosec // proto3 int64 wire encoding
}
