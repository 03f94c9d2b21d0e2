package backoff

import (
	"testing"
	"time"
)

func TestDelayGrowsAndIsCapped(t *testing.T) {
	p := Policy{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	for n, want := range []time.Duration{100, 200, 400, 800, 1600, 2000, 2000} {
		want *= time.Millisecond
		for range 50 {
			d := p.Delay(n, 0)
			if d < want/2 || d > want {
				t.Fatalf("retry %d: delay %s outside [%s, %s]", n, d, want/2, want)
			}
		}
	}
	if d := p.Delay(1000, 0); d < time.Second || d > 2*time.Second {
		t.Fatalf("retry 1000: delay %s outside [1s, 2s]", d)
	}
}

func TestDelayHonoursHintUpToMax(t *testing.T) {
	p := Policy{Min: 10 * time.Millisecond, Max: time.Second}
	if d := p.Delay(0, 500*time.Millisecond); d != 500*time.Millisecond {
		t.Fatalf("hint 500ms: delay %s", d)
	}
	if d := p.Delay(0, time.Hour); d != time.Second {
		t.Fatalf("hint 1h: delay %s, want the 1s cap", d)
	}
}

// TestDelayIsJitteredAndExponential catches a policy that always waits its
// maximum or never varies: early retries must be well below Max, and many
// draws for one retry must spread over its range, not repeat one value.
func TestDelayIsJitteredAndExponential(t *testing.T) {
	p := Policy{Min: 100 * time.Millisecond, Max: 10 * time.Second}
	var prevMean time.Duration
	for n := range 6 { // 100ms .. 3.2s: all below the cap
		seen := map[time.Duration]bool{}
		var sum, lo, hi time.Duration
		lo = p.Max
		const draws = 200
		for range draws {
			d := p.Delay(n, 0)
			seen[d] = true
			sum += d
			lo, hi = min(lo, d), max(hi, d)
		}
		if hi >= p.Max {
			t.Fatalf("retry %d: delay reached the maximum %s; an early retry must wait less", n, p.Max)
		}
		if len(seen) < draws/2 {
			t.Fatalf("retry %d: %d distinct delays in %d draws: no jitter", n, len(seen), draws)
		}
		// Uniform over [d/2, d]: 200 draws span most of it.
		nominal := p.Min << n
		if hi-lo < nominal/4 {
			t.Fatalf("retry %d: delays span only %s..%s of [%s, %s]", n, lo, hi, nominal/2, nominal)
		}
		mean := sum / draws
		if n > 0 && mean < prevMean*3/2 {
			t.Fatalf("retry %d: mean delay %s is not growing exponentially from %s", n, mean, prevMean)
		}
		prevMean = mean
	}
}
