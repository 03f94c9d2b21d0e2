// Package backoff computes capped exponential delays with jitter for
// retries.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy is a capped exponential backoff. The delay before retry n (n from
// 0) is drawn uniformly from [d/2, d] with d = min(Max, Min·2ⁿ): half the
// delay is guaranteed, so retries never degenerate into a hot loop, and the
// other half is random, so many lanes that failed together do not retry in
// lock step.
type Policy struct {
	Min time.Duration
	Max time.Duration
}

// Delay returns the delay before retry n. A server's hint wins when it asks
// for longer, but is capped at Max so a bogus hint cannot stall a lane.
func (p Policy) Delay(n int, hint time.Duration) time.Duration {
	d := p.Max
	if n < 62 {
		if e := p.Min << n; e > 0 && e < p.Max {
			d = e
		}
	}
	d = d/2 + rand.N(d/2+1)
	if hint > d {
		d = min(hint, p.Max)
	}
	return d
}
