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
