package poll

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	Until(t, time.Second, time.Millisecond, "the third call", func() bool { return calls.Add(1) >= 3 })
	if n := calls.Load(); n != 3 {
		t.Errorf("cond called %d times, want 3", n)
	}
}

// failRecorder records a Fatalf instead of ending the test.
type failRecorder struct {
	testing.TB
	msg string
}

func (f *failRecorder) Helper() {}
func (f *failRecorder) Fatalf(format string, args ...any) {
	f.msg = format
	panic(f)
}

func TestUntilFailsAfterTheTimeout(t *testing.T) {
	f := &failRecorder{TB: t}
	start := time.Now()
	func() {
		defer func() {
			if p := recover(); p != f {
				t.Fatalf("Until did not fail the test (recovered %v)", p)
			}
		}()
		Until(f, 50*time.Millisecond, 5*time.Millisecond, "never", func() bool { return false })
	}()
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("failed after %s, before the timeout", took)
	}
	if f.msg == "" {
		t.Error("no failure message")
	}
}
