package consumer

import (
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/consumer/lane"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

// TestAnswerRetriesStatusesItDoesNotKnow holds the sender's mapping of the
// pusher's statuses to the lanes' verdicts. A status this version does not
// know (a newer pusher, a bug, a corrupted answer) must be retried: mapping
// it to OK or CLIENT_ERROR would finish the record and commit past it
// although nothing says it was applied.
func TestAnswerRetriesStatusesItDoesNotKnow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status ferryv1.AckStatus
		want   lane.Status
	}{
		{"OK finishes the record", ferryv1.AckStatus_ACK_STATUS_OK, lane.OK},
		{"CLIENT_ERROR skips the record", ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR, lane.ClientError},
		{"SERVER_ERROR retries the record", ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR, lane.ServerError},
		{"UNSPECIFIED retries the record", ferryv1.AckStatus_ACK_STATUS_UNSPECIFIED, lane.ServerError},
		{"an unknown status 99 retries the record", ferryv1.AckStatus(99), lane.ServerError},
		{"a negative status retries the record", ferryv1.AckStatus(-1), lane.ServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := answer(&ferryv1.PushResponse{Status: tc.status, Reason: "why"})
			if a.Status != tc.want {
				t.Fatalf("status %d answered %v, want %v", tc.status, a.Status, tc.want)
			}
			if tc.want == lane.ServerError && !strings.Contains(a.Reason, "why") {
				t.Errorf("reason %q lost the pusher's reason", a.Reason)
			}
		})
	}
}
