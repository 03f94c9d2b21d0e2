package consumer

import (
	"sync"
	"time"
)

// logLimiter lets through at most n log lines per period, so a flood of
// bad records cannot flood the log; the metrics still count every one.
type logLimiter struct {
	n      int
	period time.Duration
	now    func() time.Time // time.Now; a test's clock in tests

	mu    sync.Mutex
	start time.Time
	used  int
}

func newLogLimiter(n int, period time.Duration) *logLimiter {
	return &logLimiter{n: n, period: period, now: time.Now}
}

// allow reports whether one more line may be logged in the current period.
func (l *logLimiter) allow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if now.Sub(l.start) > l.period {
		l.start, l.used = now, 0
	}
	if l.used >= l.n {
		return false
	}
	l.used++
	return true
}
