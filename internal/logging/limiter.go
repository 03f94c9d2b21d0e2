package logging

import (
	"sync"
	"time"
)

// maxLimiterKeys bounds the keys a Limiter remembers: keys are often
// tenant IDs, which a client chooses, so the map must not grow with them.
const maxLimiterKeys = 4096

// Limiter lets one log line per key through per interval and counts the
// lines it holds back, so that a failure repeated on every request is
// still reported, with how often it happened, without flooding the log.
// It is safe for concurrent use.
type Limiter struct {
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	keys map[string]*limiterKey
}

type limiterKey struct {
	last       time.Time
	suppressed int
}

// overflowKey stands for every key that arrives while the Limiter already
// remembers maxLimiterKeys recent ones: they share one budget.
const overflowKey = "\x00overflow"

// NewLimiter returns a Limiter letting one line per key through per
// interval.
func NewLimiter(interval time.Duration) *Limiter {
	return &Limiter{interval: interval, now: time.Now, keys: map[string]*limiterKey{}}
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
			l.keys[key] = &limiterKey{last: now}
			return true, 0
		}
	}
	if now.Sub(k.last) < l.interval {
		k.suppressed++
		return false, 0
	}
	suppressed = k.suppressed
	k.last, k.suppressed = now, 0
	return true, suppressed
}

// forgetExpired drops the keys whose interval has passed and that held no
// line back; l.mu is held.
func (l *Limiter) forgetExpired(now time.Time) {
	for key, k := range l.keys {
		if k.suppressed == 0 && now.Sub(k.last) >= l.interval {
			delete(l.keys, key)
		}
	}
}
