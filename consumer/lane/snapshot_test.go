package lane

import (
	"testing"
	"time"
)

// TestRetryingListsAFailingTenantUntilItsNextOK checks the snapshot the
// metrics and the status page read: a tenant shows up once its first round
// failed, keeps the time of that first failure across rounds, and is gone
// once a request of it is acknowledged.
func TestRetryingListsAFailingTenantUntilItsNextOK(t *testing.T) {
	t.Parallel()
	before := time.Now()
	h := newHarness(t, Config{InflightPerTenant: 2, RetryingShare: 100}, func(s sent, attempt int) Answer {
		if s.offset == 1 && attempt < 3 {
			return Answer{Status: ServerError, Reason: "storage failing"}
		}
		return Answer{Status: OK}
	})
	var seen [][]Retrying
	h.onSleep = func(int) { seen = append(seen, h.ls.Retrying()) }
	h.add("tenant-0", offsets(0, 4)...)
	h.wait()
	if len(seen) != 3 {
		t.Fatalf("%d backoffs, want 3", len(seen))
	}
	for i, snap := range seen {
		if len(snap) != 1 || snap[0].Tenant != "tenant-0" {
			t.Fatalf("backoff %d: retrying %v, want tenant-0 alone", i+1, snap)
		}
		if snap[0].Since.Before(before) || !snap[0].Since.Equal(seen[0][0].Since) {
			t.Errorf("backoff %d: since %v, want the first failure's time %v", i+1, snap[0].Since, seen[0][0].Since)
		}
	}
	if got := h.ls.Retrying(); len(got) != 0 {
		t.Errorf("after the tenant recovered: retrying %v, want none", got)
	}
}
