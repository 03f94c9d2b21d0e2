package limits

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/common/model"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/proto/wire"
)

// referenceCheckLabels is checkLabels as first written, every label
// compared with every earlier one and each rule spelt out byte by byte:
// the fast paths of checkLabels must give its answer, word for word, for
// every series.
func referenceCheckLabels(l Limits, ls []prompb.Label) string {
	if len(ls) > l.MaxLabelsPerSeries {
		return fmt.Sprintf("series has %d labels, more than the limit of %d", len(ls), l.MaxLabelsPerSeries)
	}
	classic := func(s string, colon bool) bool {
		if s == "" {
			return false
		}
		for i := 0; i < len(s); i++ {
			c := s[i]
			if !(c == '_' || (colon && c == ':') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9' && i > 0)) {
				return false
			}
		}
		return true
	}
	valid := func(s string, colon bool) bool {
		if l.NameValidation == model.LegacyValidation {
			return classic(s, colon)
		}
		return s != "" && utf8.ValidString(s)
	}
	// why is the rule an invalid name broke, as the client is told it.
	why := func(s string, colon bool) string {
		switch {
		case s == "":
			return " (empty)"
		case !utf8.ValidString(s):
			return " (not valid UTF-8)"
		case l.NameValidation != model.LegacyValidation:
			return ""
		case colon:
			return " (-limits.name-validation-scheme=legacy: [a-zA-Z_:][a-zA-Z0-9_:]*)"
		}
		return " (-limits.name-validation-scheme=legacy: [a-zA-Z_][a-zA-Z0-9_]*)"
	}
	hasName := false
	for i, lb := range ls {
		for _, prev := range ls[:i] {
			if prev.Name == lb.Name {
				return fmt.Sprintf("duplicate label name %q", lb.Name)
			}
		}
		if lb.Name == metricNameLabel {
			if len(lb.Value) > l.MaxLabelValueLength {
				return fmt.Sprintf("value of label %q has %d bytes, more than the limit of %d", lb.Name, len(lb.Value), l.MaxLabelValueLength)
			}
			if !valid(lb.Value, true) {
				return fmt.Sprintf("invalid metric name %q%s", truncate(lb.Value), why(lb.Value, true))
			}
			hasName = true
			continue
		}
		if len(lb.Name) > l.MaxLabelNameLength {
			return fmt.Sprintf("label name of %d bytes is longer than the limit of %d", len(lb.Name), l.MaxLabelNameLength)
		}
		if !valid(lb.Name, false) {
			return fmt.Sprintf("invalid label name %q%s", truncate(lb.Name), why(lb.Name, false))
		}
		if len(lb.Value) > l.MaxLabelValueLength {
			return fmt.Sprintf("value of label %q has %d bytes, more than the limit of %d", lb.Name, len(lb.Value), l.MaxLabelValueLength)
		}
		if !utf8.ValidString(lb.Value) {
			return fmt.Sprintf("value of label %q is not valid UTF-8", lb.Name)
		}
	}
	if !hasName {
		return "missing metric name"
	}
	return ""
}

// Names and values the random series below are made of: valid and invalid
// names, names that sort before and after __name__, and values whose
// non-ASCII bytes, valid or not, fall inside and after the 8-byte words
// wire.ValidUTF8 reads.
var (
	randomNames = []string{
		"__name__", "__name__", "a", "b", "cpu", "cluster", "job", "job", "Zone", "_x", "x1", "zz",
		"", "0x", "a-b", "a:b", "é", strings.Repeat("n", 33),
		"service.name", "with space", "\xff", "abcdefgh\xc3",
	}
	randomValues = []string{
		"up", "node_cpu_seconds_total", "ns:rate_5m", "", "1up", "a-b", "production", "10.0.0.1:9100",
		"zürich", "überwachung-日本", "abcdefg\xc3\xa9", "abcdefgh\xc3\xa9", "\xc3\xa9abcdefghijklmno",
		"\xff", "abcdefg\xc3", "abcdefgh\xff", "abcdefghij\xffklmnop", "abc\xed\xa0\x80def", "abcdefghijklmnop\xf0\x9f\x98", "\xffabcdefghijklmnopq",
		strings.Repeat("v", 65), strings.Repeat("é", 32),
	}
)

// randomLabels is a series of 0 to 9 labels from the pools above, sorted
// by name half of the time, as Prometheus sends them.
func randomLabels(rng *rand.Rand) []prompb.Label {
	ls := make([]prompb.Label, rng.IntN(10))
	for i := range ls {
		ls[i] = prompb.Label{Name: randomNames[rng.IntN(len(randomNames))], Value: randomValues[rng.IntN(len(randomValues))]}
	}
	if rng.IntN(2) == 0 {
		slices.SortStableFunc(ls, func(a, b prompb.Label) int { return strings.Compare(a.Name, b.Name) })
		// Mostly without duplicates, as a valid series is.
		if rng.IntN(4) > 0 {
			ls = slices.CompactFunc(ls, func(a, b prompb.Label) bool { return a.Name == b.Name })
		}
	}
	return ls
}

// nameSchemes are fuzzLimits under each name validation scheme.
func nameSchemes() []Limits {
	legacy := fuzzLimits
	legacy.NameValidation = model.LegacyValidation
	return []Limits{fuzzLimits, legacy}
}

func TestCheckLabelsMatchesReference(t *testing.T) {
	t.Parallel()
	for _, l := range nameSchemes() {
		t.Run(l.NameScheme().String(), func(t *testing.T) {
			t.Parallel()
			checkLabelsMatchesReference(t, l)
		})
	}
}

func checkLabelsMatchesReference(t *testing.T, l Limits) {
	rng := rand.New(rand.NewPCG(13, 1))
	// The random series must reach every answer, "" (valid) included.
	kinds := []string{"series has", "duplicate label name", "invalid metric name", "invalid label name", "is not valid UTF-8",
		"more than the limit", "is longer than the limit", "missing metric name", ""}
	seen := map[string]int{}
	for range 100_000 {
		ls := randomLabels(rng)
		want := referenceCheckLabels(l, ls)
		if got := l.checkLabels(ls); got != want {
			t.Fatalf("checkLabels(%s) = %q, want %q", FormatLabels(ls), got, want)
		}
		for _, k := range kinds {
			if strings.Contains(want, k) {
				seen[k]++
				break
			}
		}
	}
	for _, k := range kinds {
		if seen[k] == 0 {
			t.Errorf("no random series answered %q: %v", k, seen)
		}
	}
}

func TestValidUTF8(t *testing.T) {
	t.Parallel()
	// Every string of up to 4 bytes from an alphabet of ASCII, lead,
	// continuation and invalid bytes, alone and before or after 5 to 21
	// ASCII bytes, so that each lands in every position of wire.ValidUTF8's
	// words.
	alphabet := []byte{'a', 0x7f, 0x80, 0xa9, 0xbf, 0xc2, 0xc3, 0xe2, 0xed, 0xf0, 0xf4, 0xf5, 0xff}
	var strs []string
	var gen func(prefix []byte, n int)
	gen = func(prefix []byte, n int) {
		strs = append(strs, string(prefix))
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			gen(append(prefix, c), n-1)
		}
	}
	gen(nil, 4)
	for _, s := range strs {
		for pad := range 22 {
			if pad > 0 && pad < 5 {
				continue
			}
			for _, v := range []string{strings.Repeat("x", pad) + s, s + strings.Repeat("x", pad)} {
				if got, want := wire.ValidUTF8(v), utf8.ValidString(v); got != want {
					t.Fatalf("wire.ValidUTF8(%q) = %v, want %v", v, got, want)
				}
			}
		}
	}
}

// FuzzCheckLabels compares checkLabels with referenceCheckLabels on labels
// read from data: each label is a name and a value, each a length byte
// and that many bytes.
func FuzzCheckLabels(f *testing.F) {
	enc := func(nv ...string) []byte {
		var b []byte
		for _, s := range nv {
			b = append(b, byte(len(s)))
			b = append(b, s...)
		}
		return b
	}
	f.Add(enc("__name__", "up", "job", "a"))
	f.Add(enc("__name__", "up", "cpu", "1", "job", "a", "cpu", "2"))
	f.Add(enc("__name__", "up", "job", "x", "__name__", "down"))
	f.Add(enc("__name__", "up", "job", "zürich-süd", "mode", "abcdefgh\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var ls []prompb.Label
		next := func() string {
			if len(data) == 0 {
				return ""
			}
			n := min(int(data[0]), len(data)-1)
			s := string(data[1 : 1+n])
			data = data[1+n:]
			return s
		}
		for len(data) > 0 {
			ls = append(ls, prompb.Label{Name: next(), Value: next()})
		}
		for _, l := range nameSchemes() {
			if got, want := l.checkLabels(ls), referenceCheckLabels(l, ls); got != want {
				t.Fatalf("%s: checkLabels(%s) = %q, want %q", l.NameScheme(), FormatLabels(ls), got, want)
			}
		}
	})
}

func TestNameRules(t *testing.T) {
	t.Parallel()
	// The rules as Prometheus documents them.
	classic := func(s string, colon bool) bool {
		for i := 0; i < len(s); i++ {
			c := s[i]
			letter := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (colon && c == ':')
			if !letter && !(i > 0 && c >= '0' && c <= '9') {
				return false
			}
		}
		return s != ""
	}
	// Every byte at every position of names of 1 to 20 bytes.
	for n := 1; n <= 20; n++ {
		for pos := range n {
			for c := range 256 {
				b := []byte(strings.Repeat("a", n))
				b[pos] = byte(c)
				s := string(b)
				if got, want := wire.ValidLabelName(s), classic(s, false); got != want || got != model.LegacyValidation.IsValidLabelName(s) {
					t.Fatalf("wire.ValidLabelName(%q) = %v, want %v as model.LegacyValidation says", s, got, want)
				}
				if got, want := wire.ValidMetricName(s), classic(s, true); got != want || got != model.LegacyValidation.IsValidMetricName(s) {
					t.Fatalf("wire.ValidMetricName(%q) = %v, want %v as model.LegacyValidation says", s, got, want)
				}
			}
		}
	}
	if wire.ValidLabelName("") || wire.ValidMetricName("") {
		t.Error("the empty name is valid")
	}
}
