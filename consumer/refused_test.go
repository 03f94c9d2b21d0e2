package consumer

import (
	"bytes"
	"strings"
	"testing"

	"github.com/klauspost/compress/snappy"

	"github.com/ferrylabs/ferry/internal/loadgen"
)

// TestCheckRefusesWhatThePusherRefuses holds the consumer's check to the
// rules it shares with the pusher: the tenant-ID rule (internal/tenant)
// and wire's policy (series without labels, remote-write 2.0, snappy).
// Each is skipped as a client error with a cause and a reason that names
// the problem, before anything is sent.
func TestCheckRefusesWhatThePusherRefuses(t *testing.T) {
	t.Parallel()
	good := loadgen.Shape{Series: 2, StartMs: 1_700_000_000_000, StepMs: 1}.Marshal("tenant-1", 1)
	for _, tc := range []struct {
		name, key    string
		value        []byte
		cause, words string
	}{
		{"should accept a valid record", "tenant-1", good, "", ""},
		{"should refuse a key with a space", "tenant 1", good, "invalid_tenant", "invalid tenant ID"},
		{"should refuse a key with a newline", "tenant-1\n", good, "invalid_tenant", "invalid tenant ID"},
		{"should refuse a key of 1 MB without quoting it", strings.Repeat("k", 1<<20), good, "invalid_tenant", "1048576 bytes, at most 150"},
		{"should refuse a key with a slash", "a/b", good, "invalid_tenant", "invalid tenant ID"},
		{"should refuse series without labels", "tenant-1", bytes.Repeat([]byte{0x0a, 0x00}, 1000), "refused", "a series without labels"},
		{"should refuse a remote-write 2.0 request", "tenant-1", []byte("\x22\x00\x22\x08__name__\x2a\x04\x0a\x02\x01\x01"), "refused", "remote-write 2.0 request"},
		{"should refuse a snappy-compressed value", "tenant-1", snappy.Encode(nil, good), "refused", "snappy-compressed value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			skip := decodeConsumer().check(tc.key, tc.value)
			switch {
			case tc.cause == "" && skip != nil:
				t.Fatalf("skipped: %s %s", skip.Cause, skip.Reason)
			case tc.cause == "":
			case skip == nil:
				t.Fatalf("accepted, want %s", tc.cause)
			case skip.Cause != tc.cause || !strings.Contains(skip.Reason, tc.words) || len(skip.Reason) > 1000:
				t.Errorf("skipped %s %.200q, want %s naming %q", skip.Cause, skip.Reason, tc.cause, tc.words)
			}
		})
	}
}
