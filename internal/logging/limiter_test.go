package logging

import (
	"fmt"
	"testing"
	"time"
)

func TestLimiterLetsOneLinePerKeyPerInterval(t *testing.T) {
	now := time.Unix(1000, 0)
	l := NewLimiter(10 * time.Second)
	l.now = func() time.Time { return now }
	type step struct {
		advance    time.Duration
		key        string
		ok         bool
		suppressed int
	}
	for i, s := range []step{
		{0, "a", true, 0},
		{time.Second, "a", false, 0},
		{time.Second, "b", true, 0}, // keys are independent
		{time.Second, "a", false, 0},
		{7 * time.Second, "a", true, 2}, // 10 s after the first: reports the two held back
		{9 * time.Second, "a", false, 0},
		{time.Second, "a", true, 1},
	} {
		now = now.Add(s.advance)
		ok, suppressed := l.Allow(s.key)
		if ok != s.ok || suppressed != s.suppressed {
			t.Fatalf("step %d (%s): Allow = %v, %d; want %v, %d", i, s.key, ok, suppressed, s.ok, s.suppressed)
		}
	}
}

// TestLimiterMemoryIsBounded: keys chosen by clients (tenant IDs) must not
// grow the limiter without bound, nor unlimit the lines of new keys.
func TestLimiterMemoryIsBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	l := NewLimiter(10 * time.Second)
	l.now = func() time.Time { return now }
	allowed := 0
	for i := range 3 * maxLimiterKeys {
		if ok, _ := l.Allow(fmt.Sprint(i)); ok {
			allowed++
		}
	}
	if len(l.keys) > maxLimiterKeys+1 {
		t.Fatalf("%d keys remembered", len(l.keys))
	}
	if allowed != maxLimiterKeys+1 {
		t.Fatalf("%d lines allowed in one interval, want %d", allowed, maxLimiterKeys+1)
	}
}

// TestLimiterLetsSeveralLinesPerKeyPerInterval: the consumer lets ten
// lines of skipped records through per second, not one.
func TestLimiterLetsSeveralLinesPerKeyPerInterval(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := NewLimiterN(3, time.Second)
	l.now = func() time.Time { return now }
	count := func(tries int) int {
		n := 0
		for range tries {
			if l.Allowed("") {
				n++
			}
		}
		return n
	}
	if got := count(100); got != 3 {
		t.Fatalf("first interval: %d of 100 lines allowed, want 3", got)
	}
	now = now.Add(500 * time.Millisecond)
	if got := count(100); got != 0 {
		t.Fatalf("later in the same interval: %d lines allowed, want 0", got)
	}
	now = now.Add(600 * time.Millisecond)
	if ok, suppressed := l.Allow(""); !ok || suppressed != 197 {
		t.Fatalf("next interval: Allow = %v, %d; want true and the 197 held back", ok, suppressed)
	}
	if got := count(100); got != 2 {
		t.Fatalf("rest of the next interval: %d of 100 lines allowed, want 2", got)
	}
}
