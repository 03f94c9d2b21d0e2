package consumer

import (
	"testing"
	"time"
)

func TestLogLimiterLimitsPerPeriod(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := newLogLimiter(3, time.Second)
	l.now = func() time.Time { return now }
	count := func(tries int) int {
		n := 0
		for range tries {
			if l.allow() {
				n++
			}
		}
		return n
	}
	if got := count(100); got != 3 {
		t.Fatalf("first period: %d of 100 lines allowed, want 3", got)
	}
	now = now.Add(500 * time.Millisecond)
	if got := count(100); got != 0 {
		t.Fatalf("later in the same period: %d lines allowed, want 0", got)
	}
	now = now.Add(600 * time.Millisecond)
	if got := count(100); got != 3 {
		t.Fatalf("next period: %d of 100 lines allowed, want 3", got)
	}
}
