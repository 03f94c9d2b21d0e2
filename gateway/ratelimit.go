package gateway

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// tenantLimiter is the per-tenant ingestion rate limit: a token bucket of
// samples per tenant. A request takes all its samples from the bucket or
// none.
type tenantLimiter struct {
	limit rate.Limit
	burst int

	mu      sync.Mutex
	tenants map[string]*rate.Limiter
}

// newTenantLimiter returns a limiter of perSecond samples per second with
// the given burst; perSecond 0 admits everything.
func newTenantLimiter(perSecond float64, burst int) *tenantLimiter {
	return &tenantLimiter{limit: rate.Limit(perSecond), burst: burst, tenants: map[string]*rate.Limiter{}}
}

// admit takes n samples from tenant's bucket. When the bucket has too few
// it takes nothing and says how long until it would have enough; tooMany
// means n is over the burst and can never be admitted.
func (l *tenantLimiter) admit(tenant string, n int, now time.Time) (wait time.Duration, tooMany bool) {
	if l.limit == 0 || n == 0 {
		return 0, false
	}
	if n > l.burst {
		return 0, true
	}
	l.mu.Lock()
	lim, ok := l.tenants[tenant]
	if !ok {
		lim = rate.NewLimiter(l.limit, l.burst)
		l.tenants[tenant] = lim
	}
	l.mu.Unlock()
	r := lim.ReserveN(now, n)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d, false
	}
	return 0, false
}

// retryAfterSeconds rounds d up to whole seconds, at least 1, as the
// Retry-After header counts.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
