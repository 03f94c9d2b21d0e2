package wire

import (
	"testing"

	"github.com/prometheus/common/model"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// scanRules are the pusher's default label rules under scheme.
func scanRules(scheme model.ValidationScheme) LabelRules {
	return LabelRules{MaxLabelsPerSeries: 30, MaxLabelNameLength: 1024, MaxLabelValueLength: 2048, NameValidation: scheme}
}

// scanOf reports whether Scan vouches for the one-series request of ls
// under scheme.
func scanOf(t *testing.T, scheme model.ValidationScheme, ls ...string) bool {
	t.Helper()
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Samples: []prompb.Sample{{Value: 1, Timestamp: 1000}}}}}
	for i := 0; i+1 < len(ls); i += 2 {
		req.Timeseries[0].Labels = append(req.Timeseries[0].Labels, prompb.Label{Name: ls[i], Value: ls[i+1]})
	}
	var d Decoder
	_, ok := d.Scan(mustMarshal(t, req), scanRules(scheme))
	return ok
}

func TestScanVouchesForUTF8NamesOnlyUnderUTF8Validation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		labels       []string
		legacy, utf8 bool
	}{
		{"classic names", []string{"__name__", "http_requests_total", "job", "api"}, true, true},
		{"a dotted metric name", []string{"__name__", "http.server.request.duration"}, false, true},
		{"a metric name with a space", []string{"__name__", "request count"}, false, true},
		{"a dotted label name", []string{"__name__", "up", "service.name", "api"}, false, true},
		{"a label name with a space of more than sixteen bytes", []string{"__name__", "up", "deployment environment", "prod"}, false, true},
		{"a label name of other scripts", []string{"__name__", "up", "städte", "x"}, false, true},
		{"a metric name not UTF-8", []string{"__name__", "http.server\xff"}, false, false},
		{"a label name not UTF-8", []string{"__name__", "up", "service.\xfename", "x"}, false, false},
		{"a label name with a truncated rune", []string{"__name__", "up", "zürich\xc3", "x"}, false, false},
		{"an empty metric name", []string{"__name__", ""}, false, false},
		{"an empty label name", []string{"", "x", "__name__", "up"}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := scanOf(t, model.LegacyValidation, tc.labels...); got != tc.legacy {
				t.Errorf("legacy: Scan vouched %v, want %v", got, tc.legacy)
			}
			if got := scanOf(t, model.UTF8Validation, tc.labels...); got != tc.utf8 {
				t.Errorf("utf8: Scan vouched %v, want %v", got, tc.utf8)
			}
			if got := scanOf(t, model.UnsetValidation, tc.labels...); got != tc.utf8 {
				t.Errorf("unset: Scan vouched %v, want UTF-8's %v", got, tc.utf8)
			}
		})
	}
}

// A label written after a sample is checked where it is read, not with
// the labels before the first sample: an encoder may write fields in any
// order.
func TestScanChecksTheNamesOfLabelsAfterASampleAsUTF8(t *testing.T) {
	t.Parallel()
	sample := msgField(2, doubleField(1, 1), varintField(2, 1000))
	series := func(name, value string) []byte {
		return msgField(1, cat(labelMsgField("__name__", "up"), sample, labelMsgField(name, value)))
	}
	for _, tc := range []struct {
		name, value string
		utf8        bool
	}{
		{"service.name", "api", true},
		{"service.\xfename", "api", false},
		{"zürich\xc3", "api", false},
		{"service", "a\xff", false},
	} {
		var d Decoder
		if _, ok := d.Scan(series(tc.name, tc.value), scanRules(model.UTF8Validation)); ok != tc.utf8 {
			t.Errorf("Scan of a label %q=%q after a sample vouched %v, want %v", tc.name, tc.value, ok, tc.utf8)
		}
		if _, ok := d.Scan(series(tc.name, tc.value), scanRules(model.LegacyValidation)); ok {
			t.Errorf("legacy: Scan of a label %q=%q vouched for it", tc.name, tc.value)
		}
	}
}

// labelMsgField is a TimeSeries' label field of name and value.
func labelMsgField(name, value string) []byte {
	return msgField(1, labelMsg(name, value))
}

func TestTheConsumersValidationLeavesNamesToThePusher(t *testing.T) {
	t.Parallel()
	// ValidateWriteRequest checks structure only: names, valid or not under
	// either scheme, are judged series by series by the pusher, which
	// keeps the good series of a request.
	for _, name := range []string{"http.server.request.duration", "request count", "bad\xff"} {
		req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
			Labels:  []prompb.Label{{Name: "__name__", Value: name}, {Name: name, Value: "x"}},
			Samples: []prompb.Sample{{Value: 1, Timestamp: 1000}},
		}}}
		if err := ValidateWriteRequest(mustMarshal(t, req)); err != nil {
			t.Errorf("ValidateWriteRequest of the name %q: %v", name, err)
		}
	}
}
