package lane

import (
	"slices"
	"strings"
	"time"
)

// Retrying is one lane whose requests are being retried: what an operator
// needs to see which tenant is stuck and since when.
type Retrying struct {
	Tenant string
	// Since is when the tenant's first failed round ended: it has not had
	// a request acknowledged OK since.
	Since time.Time
}

// Retrying returns the lanes being retried now, oldest first. It only
// reads: the status page and the metrics call it at any time.
func (ls *Lanes) Retrying() []Retrying {
	ls.mu.Lock()
	var out []Retrying
	for _, l := range ls.m {
		if !l.failingSince.IsZero() {
			out = append(out, Retrying{Tenant: l.tenant, Since: l.failingSince})
		}
	}
	ls.mu.Unlock()
	slices.SortFunc(out, func(a, b Retrying) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return strings.Compare(a.Tenant, b.Tenant)
	})
	return out
}

// markFailing records that l's requests started failing, for Retrying.
// Whatever the cause (a server error or a broken stream), the tenant's
// records are waiting.
func (ls *Lanes) markFailing(l *lane) {
	ls.mu.Lock()
	if l.failingSince.IsZero() {
		l.failingSince = time.Now()
	}
	ls.mu.Unlock()
}
