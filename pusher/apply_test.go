package pusher

import (
	"errors"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/limits"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

func TestEveryBackendClassHasItsAcknowledgement(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		class backend.Class
		want  ferryv1.AckStatus
	}{
		{backend.ClassOK, ferryv1.AckStatus_ACK_STATUS_OK},
		{backend.ClassClient, ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR},
		{backend.ClassServer, ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR},
		// A class this server does not know is retried, never skipped.
		{backend.Class(200), ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR},
	} {
		if got := ackStatus(tc.class); got != tc.want {
			t.Errorf("ackStatus(%s) = %s, want %s", tc.class, got, tc.want)
		}
	}
}

// labels builds labels from name, value pairs.
func labels(nv ...string) []prompb.Label {
	ls := make([]prompb.Label, 0, len(nv)/2)
	for i := 0; i+1 < len(nv); i += 2 {
		ls = append(ls, prompb.Label{Name: nv[i], Value: nv[i+1]})
	}
	return ls
}

// TestCheckAnswersTheSharedRulesAsAClientError: the applier's storage-free
// checks are package limits' Filter, the gateway's, with its violation as
// the ClientError the consumer skips.
func TestCheckAnswersTheSharedRulesAsAClientError(t *testing.T) {
	t.Parallel()
	now := time.Now()
	a := &applier{now: func() time.Time { return now }}
	a.cfg.MaxRequestBytes = 1 << 20
	a.cfg.Limits = limits.Limits{MaxLabelsPerSeries: 5, MaxLabelNameLength: 16, MaxLabelValueLength: 32, CreationGracePeriod: time.Minute, MaxMetadataLength: 16, MaxMetadataBytesPerRequest: 64}
	req := &ferryv1.PushRequest{Tenant: "tenant-1", WriteRequest: prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
		Labels:  labels("__name__", "bad\xffname"),
		Samples: []prompb.Sample{{Value: 1, Timestamp: now.UnixMilli()}},
	}}}}
	c, _, err := a.check(req, 100)
	if err != nil {
		t.Fatalf("check refused the request whole: %v", err)
	}
	first := c.invalid
	var v *limits.Violation
	if c.rejected != 1 || first == nil || !errors.As(first, &v) || v.Rule != limits.RuleLabels || first.Reason != v.Reason {
		t.Fatalf("check() = %d, %v; want 1 sample rejected as a ClientError caused by an %s violation", c.rejected, first, limits.RuleLabels)
	}
}
