package backend

import (
	"context"
	"sync/atomic"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// Discard is the backend for load tests: it counts what it is given and
// stores nothing, so it keeps no part of a request past Push (see Backend).
// Validation still happens in the server before Push.
type Discard struct {
	requests atomic.Int64
	samples  atomic.Int64
}

// NewDiscard returns a Discard backend.
func NewDiscard() *Discard { return &Discard{} }

// Push counts the request and accepts all of it.
func (d *Discard) Push(_ context.Context, _ string, req *prompb.WriteRequest) (Result, error) {
	n := Count(req)
	d.requests.Add(1)
	d.samples.Add(n)
	return Result{Accepted: n}, nil
}

// Sync has nothing to make durable.
func (d *Discard) Sync(context.Context) (int, error) { return 0, nil }

// Close does nothing.
func (d *Discard) Close() error { return nil }

// Counts returns the requests and samples pushed so far.
func (d *Discard) Counts() (requests, samples int64) {
	return d.requests.Load(), d.samples.Load()
}
