package pusher

import (
	"testing"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
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
