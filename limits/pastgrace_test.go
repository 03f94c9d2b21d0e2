package limits

import (
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// TestFilterPastGracePeriod: a sample older than -limits.past-grace-period
// is a client error, as one too far in the future is; 0 only keeps the
// 1970 bound.
func TestFilterPastGracePeriod(t *testing.T) {
	old := filterNow.Add(-48 * time.Hour).UnixMilli()
	req := func() *prompb.WriteRequest {
		return &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
			Labels:  labels("__name__", "x"),
			Samples: []prompb.Sample{{Timestamp: old, Value: 1}, {Timestamp: goodTs, Value: 2}},
		}}}
	}
	limits := testLimits
	limits.PastGracePeriod = 24 * time.Hour
	r := req()
	rejected, first := limits.Filter(r, filterNow)
	if rejected != 1 || first == nil || !strings.Contains(first.Reason, "-limits.past-grace-period") {
		t.Fatalf("rejected %d, %v", rejected, first)
	}
	if got := r.Timeseries[0].Samples; len(got) != 1 || got[0].Timestamp != goodTs {
		t.Fatalf("kept %v", got)
	}

	limits.PastGracePeriod = 0
	if rejected, first := limits.Filter(req(), filterNow); rejected != 0 || first != nil {
		t.Fatalf("with 0: rejected %d, %v", rejected, first)
	}
}
