package gateway

import (
	"testing"
	"time"
)

func TestTenantLimiter(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name     string
		limit    float64
		burst    int
		steps    []int // samples per request, all at now
		wantWait []bool
		tooMany  bool
	}{
		{name: "a zero limit admits everything", limit: 0, burst: 1, steps: []int{1e6, 1e6}, wantWait: []bool{false, false}},
		{name: "requests within the burst are admitted", limit: 10, burst: 100, steps: []int{50, 50}, wantWait: []bool{false, false}},
		{name: "a request past the burst waits and takes nothing", limit: 10, burst: 100, steps: []int{80, 30, 20}, wantWait: []bool{false, true, false}},
		{name: "a request over the burst can never be admitted", limit: 10, burst: 100, steps: []int{101}, tooMany: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newTenantLimiter(tc.limit, tc.burst)
			for i, n := range tc.steps {
				wait, tooMany := l.admit("t", n, now)
				if tooMany != tc.tooMany {
					t.Fatalf("request %d: tooMany %v", i, tooMany)
				}
				if !tc.tooMany && (wait > 0) != tc.wantWait[i] {
					t.Fatalf("request %d of %d samples: wait %s, want waiting %v", i, n, wait, tc.wantWait[i])
				}
			}
		})
	}
}

func TestATenantsBucketRefillsAtItsRateAndOthersAreUntouched(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	l := newTenantLimiter(10, 100)
	if wait, _ := l.admit("a", 100, now); wait != 0 {
		t.Fatal("first request waited")
	}
	wait, _ := l.admit("a", 20, now)
	if wait != 2*time.Second {
		t.Fatalf("wait %s, want 2s for 20 samples at 10/s", wait)
	}
	if retryAfterSeconds(wait) != 2 || retryAfterSeconds(time.Millisecond) != 1 {
		t.Error("Retry-After is not rounded up to whole seconds")
	}
	if wait, _ := l.admit("b", 100, now); wait != 0 {
		t.Error("another tenant was limited")
	}
	if wait, _ := l.admit("a", 20, now.Add(2*time.Second)); wait != 0 {
		t.Errorf("after the refill: wait %s", wait)
	}
}
