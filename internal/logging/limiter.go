package logging

import (
	"sync"
	"time"
)

// maxLimiterKeys bounds the keys a Limiter remembers: keys are often
// tenant IDs, which a client chooses, so the map must not grow with them.
const maxLimiterKeys = 4096

// Limiter lets a few log lines per key through per interval and counts the
// lines it holds back, so that a failure repeated on every request is
// still reported, with how often it happened, without flooding the log.
// It is Ferry's one log limiter: the pusher keys it by tenant, the
// consumer by kind of line. It is safe for concurrent use.
//
// Its windows are fixed, not a token bucket (golang.org/x/time/rate): a
// window's lines are let through at once, and the next line after the
// window reports how many were held back in it — a count a token bucket
// does not keep.
type Limiter struct {
	lines    int
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	keys map[string]*limiterKey
}

// limiterKey is one key's current window.
type limiterKey struct {
	start      time.Time
	used       int
	suppressed int
}

// overflowKey stands for every key that arrives while the Limiter already
// remembers maxLimiterKeys recent ones: they share one budget.
const overflowKey = "\x00overflow"

// NewLimiter returns a Limiter letting one line per key through per
// interval.
func NewLimiter(interval time.Duration) *Limiter {
	return NewLimiterN(1, interval)
}

// NewLimiterN returns a Limiter letting lines (at least 1) lines per key
// through per interval.
func NewLimiterN(lines int, interval time.Duration) *Limiter {
	return &Limiter{lines: max(lines, 1), interval: interval, now: time.Now, keys: map[string]*limiterKey{}}
}

// Allow reports whether a line for key may be logged now and, when it may,
// how many lines for key were held back since the previous one.
func (l *Limiter) Allow(key string) (ok bool, suppressed int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	k, found := l.keys[key]
	if !found {
		if len(l.keys) >= maxLimiterKeys {
			l.forgetExpired(now)
		}
		if len(l.keys) >= maxLimiterKeys {
			key = overflowKey
			k = l.keys[key]
		}
		if k == nil {
			l.keys[key] = &limiterKey{start: now, used: 1}
			return true, 0
		}
	}
	if now.Sub(k.start) >= l.interval {
		suppressed = k.suppressed
		k.start, k.used, k.suppressed = now, 1, 0
		return true, suppressed
	}
	if k.used < l.lines {
		k.used++
		return true, 0
	}
	k.suppressed++
	return false, 0
}

// Allowed is Allow without the count of lines held back.
func (l *Limiter) Allowed(key string) bool {
	ok, _ := l.Allow(key)
	return ok
}

// forgetExpired drops the keys whose interval has passed and that held no
// line back; l.mu is held.
func (l *Limiter) forgetExpired(now time.Time) {
	for key, k := range l.keys {
		if k.suppressed == 0 && now.Sub(k.start) >= l.interval {
			delete(l.keys, key)
		}
	}
}
