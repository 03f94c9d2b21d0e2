package limits

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/prometheus/common/model"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// parseLimits registers the limits' flags on a new set and parses args.
func parseLimits(t *testing.T, args ...string) (Limits, error) {
	t.Helper()
	var l Limits
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	l.RegisterFlags(fs)
	err := fs.Parse(args)
	if err == nil {
		err = l.Validate()
	}
	return l, err
}

func TestTheNameValidationSchemeIsUTF8ByDefaultAsInPrometheus3(t *testing.T) {
	t.Parallel()
	l, err := parseLimits(t)
	if err != nil {
		t.Fatal(err)
	}
	if l.NameValidation != model.UTF8Validation || l.NameScheme() != model.UTF8Validation {
		t.Fatalf("default scheme %v, want utf8", l.NameValidation)
	}
	if (Limits{}).NameScheme() != model.UTF8Validation {
		t.Fatal("the zero Limits do not validate names as UTF-8, the flag's default")
	}
	if l.LabelRules().NameValidation != model.UTF8Validation {
		t.Fatal("Scan's rules do not carry the scheme")
	}
}

func TestTheNameValidationSchemeFlagTakesLegacyAndRefusesAnythingElse(t *testing.T) {
	t.Parallel()
	l, err := parseLimits(t, "-limits.name-validation-scheme=legacy")
	if err != nil || l.NameScheme() != model.LegacyValidation || l.LabelRules().NameValidation != model.LegacyValidation {
		t.Fatalf("legacy: %v, %v", l.NameValidation, err)
	}
	if _, err := parseLimits(t, "-limits.name-validation-scheme=ascii"); err == nil || !strings.Contains(err.Error(), "-limits.name-validation-scheme") {
		t.Fatalf("ascii: err = %v, want one naming the flag", err)
	}
	bad := Limits{MaxLabelsPerSeries: 1, MaxLabelNameLength: 1, MaxLabelValueLength: 1, MaxSeriesPerRequest: 1,
		MaxSamplesPerSeries: 1, MaxMetadataLength: 1, MaxMetadataBytesPerRequest: 1, NameValidation: 9}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "-limits.name-validation-scheme") {
		t.Fatalf("scheme 9: err = %v, want one naming the flag", err)
	}
}

// otelLabels are the labels of an OpenTelemetry metric kept with its
// UTF-8 names, sorted as a client sends them.
var otelLabels = labels("__name__", "http.server.request.duration", "deployment env", "prod", "service.name", "api")

func TestUTF8NamesAreKeptUnderUTF8AndRefusedUnderLegacyNamingTheRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		ls     []prompb.Label
		reason string // under legacy
	}{
		{"a dotted metric name", labels("__name__", "http.server.request.duration"),
			`invalid metric name "http.server.request.duration" (-limits.name-validation-scheme=legacy: [a-zA-Z_:][a-zA-Z0-9_:]*)`},
		{"a metric name with a space", labels("__name__", "request count"),
			`invalid metric name "request count" (-limits.name-validation-scheme=legacy`},
		{"a dotted label name", labels("__name__", "up", "service.name", "api"),
			`invalid label name "service.name" (-limits.name-validation-scheme=legacy: [a-zA-Z_][a-zA-Z0-9_]*)`},
		{"a label name with a space", labels("__name__", "up", "zone name", "eu"),
			`invalid label name "zone name" (-limits.name-validation-scheme=legacy`},
		{"a label name of other scripts", labels("__name__", "up", "städte", "x"), `invalid label name "städte"`},
		{"an OpenTelemetry series", otelLabels, `invalid metric name "http.server.request.duration"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{series(tc.ls, 1), series(labels("__name__", "up"), 2)}}
			if n, first := utf8Limits.Filter(req, filterNow); n != 0 || first != nil || len(req.Timeseries) != 2 {
				t.Fatalf("utf8: Filter() = %d, %v; kept %d series of 2", n, first, len(req.Timeseries))
			}
			n, first := testLimits.Filter(req, filterNow)
			switch {
			case n != 1 || len(req.Timeseries) != 1:
				t.Fatalf("legacy: rejected %d, kept %d series; want 1 and the classic one", n, len(req.Timeseries))
			case first == nil || first.Rule != RuleLabels || !strings.Contains(first.Reason, tc.reason):
				t.Fatalf("legacy: Filter() = %+v, want rule %s and a reason with %q", first, RuleLabels, tc.reason)
			}
		})
	}
}

func TestNamesThatAreNotUTF8OrEmptyAreRefusedUnderBothSchemes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		ls     []prompb.Label
		reason string
	}{
		{"a metric name with an invalid byte", labels("__name__", "http.requests\xff"), `invalid metric name "http.requests\xff" (not valid UTF-8)`},
		{"a metric name with a truncated rune", labels("__name__", "zürich\xc3"), `(not valid UTF-8)`},
		{"a label name with an invalid byte", labels("__name__", "up", "service.\xfename", "x"), `invalid label name "service.\xfename" (not valid UTF-8)`},
		{"a label name of a surrogate", labels("__name__", "up", "a\xed\xa0\x80", "x"), `(not valid UTF-8)`},
		{"an empty metric name", labels("__name__", ""), `invalid metric name "" (empty)`},
		{"an empty label name", labels("__name__", "up", "", "x"), `invalid label name "" (empty)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, l := range []Limits{utf8Limits, testLimits} {
				req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{series(tc.ls, 1)}}
				n, first := l.Filter(req, filterNow)
				if n != 1 || first == nil || first.Rule != RuleLabels || !strings.Contains(first.Reason, tc.reason) {
					t.Fatalf("%s: Filter() = %d, %+v; want 1 rejected and a reason with %q", l.NameScheme(), n, first, tc.reason)
				}
			}
		})
	}
}

func TestFormatLabelsQuotesNamesThatAreNotClassicAsPromQLDoes(t *testing.T) {
	t.Parallel()
	got := FormatLabels(labels("__name__", "http.server.request.duration", "job", "api", "service.name", "a\"b", "bad\xff", "x"))
	want := `{__name__="http.server.request.duration", job="api", "service.name"="a\"b", "bad\xff"="x"}`
	if got != want {
		t.Fatalf("FormatLabels() = %s, want %s", got, want)
	}
}

func TestMetadataOfAFamilyNameTheSchemeRefusesIsRefused(t *testing.T) {
	t.Parallel()
	md := func(name string) []prompb.MetricMetadata {
		return []prompb.MetricMetadata{{MetricFamilyName: name, Help: "h"}, {MetricFamilyName: "up", Help: "h"}}
	}
	for _, tc := range []struct {
		family       string
		legacy, utf8 string // the reason, "" when kept
	}{
		{"http_requests_total", "", ""},
		{"http.server.request.duration", `metadata of an invalid metric family name "http.server.request.duration" (-limits.name-validation-scheme=legacy: [a-zA-Z_:][a-zA-Z0-9_:]*)`, ""},
		{"bad\xff", `(not valid UTF-8)`, `metadata of an invalid metric family name "bad\xff" (not valid UTF-8)`},
	} {
		for _, l := range []Limits{testLimits, utf8Limits} {
			want := tc.utf8
			if l.NameScheme() == model.LegacyValidation {
				want = tc.legacy
			}
			l.MaxMetadataLength, l.MaxMetadataBytesPerRequest = 1024, 1<<20
			req := &prompb.WriteRequest{Metadata: md(tc.family)}
			_, first := l.Filter(req, filterNow)
			switch {
			case want == "" && (first != nil || len(req.Metadata) != 2):
				t.Errorf("%s: metadata of %q: %v, %d entries kept; want both kept", l.NameScheme(), tc.family, first, len(req.Metadata))
			case want != "" && (first == nil || first.Rule != RuleMetadata || !strings.Contains(first.Reason, want) || len(req.Metadata) != 1):
				t.Errorf("%s: metadata of %q: %+v, %d entries kept; want rule %s saying %q and up's kept", l.NameScheme(), tc.family, first, len(req.Metadata), RuleMetadata, want)
			}
		}
	}
}

func TestNameChecksAnswerAsPrometheusSchemes(t *testing.T) {
	t.Parallel()
	// Every byte at every position of names of 1 to 20 bytes, alone and
	// after a classic prefix, and the random pools' names and values.
	names := append(append([]string{""}, randomNames...), randomValues...)
	for n := 1; n <= 20; n++ {
		for pos := range n {
			for c := range 256 {
				b := []byte(strings.Repeat("a", n))
				b[pos] = byte(c)
				names = append(names, string(b), "k8s."+string(b), string(b)+"\xc3\xa9")
			}
		}
	}
	for _, scheme := range []model.ValidationScheme{model.UTF8Validation, model.LegacyValidation} {
		for _, s := range names {
			if got, want := validLabelName(scheme, s), scheme.IsValidLabelName(s); got != want {
				t.Fatalf("%s: validLabelName(%q) = %v, want %v", scheme, s, got, want)
			}
			if got, want := validMetricName(scheme, s), scheme.IsValidMetricName(s); got != want {
				t.Fatalf("%s: validMetricName(%q) = %v, want %v", scheme, s, got, want)
			}
		}
	}
}
