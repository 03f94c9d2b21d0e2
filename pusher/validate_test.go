package pusher

import (
	"errors"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/limits"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// labels builds labels from name, value pairs.
func labels(nv ...string) []prompb.Label {
	ls := make([]prompb.Label, 0, len(nv)/2)
	for i := 0; i+1 < len(nv); i += 2 {
		ls = append(ls, prompb.Label{Name: nv[i], Value: nv[i+1]})
	}
	return ls
}

// TestFilterAnswersTheSharedRulesAsAClientError: the pusher's Filter is
// package limits' Filter, the gateway's, with its violation as the
// ClientError the consumer skips.
func TestFilterAnswersTheSharedRulesAsAClientError(t *testing.T) {
	t.Parallel()
	now := time.Now()
	l := Limits{limits.Limits{MaxLabelsPerSeries: 5, MaxLabelNameLength: 16, MaxLabelValueLength: 32, CreationGracePeriod: time.Minute, MaxMetadataLength: 16, MaxMetadataBytesPerRequest: 64}}
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
		Labels:  labels("__name__", "bad\xffname"),
		Samples: []prompb.Sample{{Value: 1, Timestamp: now.UnixMilli()}},
	}}}
	rejected, first := l.Filter(req, now)
	var v *limits.Violation
	if rejected != 1 || first == nil || !errors.As(first, &v) || v.Rule != limits.RuleLabels || first.Reason != v.Reason {
		t.Fatalf("Filter() = %d, %v; want 1 sample rejected as a ClientError caused by an %s violation", rejected, first, limits.RuleLabels)
	}
}
