package queryapi

import (
	"context"
	"errors"

	"github.com/prometheus/prometheus/promql"
)

// limiter is a promql.QueryTracker that only bounds concurrency.
// Prometheus' own ActiveQueryTracker also logs queries to an mmapped file
// to report them after a crash; the pusher has no directory for that, and
// handing the engine a tracker (rather than gating in the HTTP handler)
// keeps the slot held exactly while the engine parses and evaluates.
type limiter struct {
	slots chan struct{}
}

var _ promql.QueryTracker = (*limiter)(nil)

func newLimiter(n int) *limiter { return &limiter{slots: make(chan struct{}, n)} }

// GetMaxConcurrent implements promql.QueryTracker.
func (l *limiter) GetMaxConcurrent() int { return cap(l.slots) }

// Insert blocks until a slot is free or ctx ends. The context error is
// turned into promql's typed errors so that a query that waited too long
// is answered as a timeout (503), not as a failed execution.
func (l *limiter) Insert(ctx context.Context, _ string) (int, error) {
	select {
	case l.slots <- struct{}{}:
		return 0, nil
	case <-ctx.Done():
		err := ctx.Err()
		if errors.Is(err, context.DeadlineExceeded) {
			return 0, promql.ErrQueryTimeout("waiting for a free query slot")
		}
		return 0, promql.ErrQueryCanceled("waiting for a free query slot")
	}
}

// Delete implements promql.QueryTracker; it frees the slot Insert took.
func (l *limiter) Delete(int) { <-l.slots }

// Close implements promql.QueryTracker; there is nothing to release.
func (l *limiter) Close() error { return nil }
