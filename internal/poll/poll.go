// Package poll waits, in tests, for a condition that other goroutines or
// processes make true.
package poll

import (
	"testing"
	"time"
)

// Until checks cond every interval until it holds, and fails the test when
// it still does not after timeout. what names the wait in that failure.
func Until(t testing.TB, timeout, interval time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(interval)
	}
}
