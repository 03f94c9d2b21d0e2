package tsdbstore

import (
	"github.com/prometheus/prometheus/tsdb"

	"github.com/ferrylabs/ferry/pusher/backend"
)

// The registry's side of durability: the TSDBs a sync round covers, and
// the broken and recovering states a recovery sets (recover.go), kept
// under the registry's lock because they decide whether a TSDB may close.

// holdOpen returns, with a reference each, the open TSDBs a sync round
// covers, every one (all) or those whose ID is in ids, and the closing
// channels of those being closed; a TSDB still opening has committed
// nothing and is neither.
func (r *registry) holdOpen(all bool, ids map[string]struct{}) (open []*tenantDB, closing []chan struct{}, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, nil, backend.ErrShuttingDown
	}
	for _, t := range r.byID {
		_, covered := ids[t.id]
		switch {
		case !all && !covered:
		case t.closing != nil:
			closing = append(closing, t.closing)
		case t.db != nil:
			t.refs++
			open = append(open, t)
		}
	}
	return open, closing, nil
}

// markBroken marks t's storage lost. It reports whether t was not broken
// before, and whether the caller is to recover it: no recovery runs and
// the registry is not shut; then a background task is counted, which
// the caller runs and ends with background.Done.
func (r *registry) markBroken(t *tenantDB) (first, recover bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !t.broken.Load() {
		t.broken.Store(true)
		first = true
		r.broken++
	}
	if t.recovering || r.closed {
		return first, false
	}
	t.recovering = true
	r.background.Add(1)
	return first, true
}

// takeOutOfUse makes acquire, closeIdle and Sync wait for t, and returns
// once no one holds a reference on it; returnToUse ends that.
func (r *registry) takeOutOfUse(t *tenantDB) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t.closing = make(chan struct{})
	for t.refs > 0 {
		r.idle.Wait()
	}
}

// returnToUse ends takeOutOfUse and t's recovery; recovered clears its
// broken mark.
func (r *registry) returnToUse(t *tenantDB, recovered bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	done := t.closing
	t.closing = nil
	t.recovering = false
	if recovered && t.broken.Load() {
		t.broken.Store(false)
		r.broken--
	}
	close(done)
	r.idle.Broadcast()
}

// setDB replaces t's TSDB: the metrics collector reads t.db under r.mu.
func (r *registry) setDB(t *tenantDB, db *tsdb.DB) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t.db = db
}

// brokenCount is the number of TSDBs whose storage is lost and not
// recovered yet.
func (r *registry) brokenCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.broken
}
