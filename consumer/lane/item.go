package lane

import (
	"context"
	"time"
)

// Item is one record on its way through a lane. Its states, changed by
// Add, settle and finish on its way (deliver.go) and by its parking (this
// file):
//
//	Add ─┬─▶ held: value in memory, window room taken ─▶ sent ─▶ finished: OK or skipped
//	     │     │ its tenant starts retrying and it is        ▲  │   (room back, World.Finish)
//	     │     │ beyond the share (parkBeyondShare)          │  │ server error, broken stream:
//	     │     ▼                                             │  └─ sent again, in order,
//	     └─▶ parked: value dropped, no window room           │     with the same sequence
//	           └─ its turn comes: reread, validate, unpark ──┘
//
// A tenant whose requests keep failing must not stall the others: while
// its lane is retrying, its records beyond Config.RetryingShare are
// parked, giving their window room to the other tenants. A parked item is
// still pending for its caller (its offset is not committed past) and is
// read from Kafka again, in order, when the lane reaches it. Memory stays
// bounded by the window; a parked item costs its metadata only.
type Item struct {
	Partition int32
	Offset    int64
	Tenant    string
	// Timestamp is the record's, for the caller's latency metric.
	Timestamp time.Time
	// Value is sent as it came; nil while parked and once finished.
	Value []byte
	// Size is the bytes of the value, held in the window unless parked.
	Size int
	// Skip is set by validation when the record cannot be pushed at all.
	Skip *Skip

	validated chan struct{} // closed once Skip is final
	// sequence is its place in the requests, given when first sent and
	// kept when it is sent again.
	sequence uint64
	parked   bool
}

// Skip says why a record is a client error before it reaches the pusher:
// retrying cannot make it valid.
type Skip struct {
	Cause  string // a label of ferry_consumer_skipped_records_total
	Reason string
}

// park drops the item's value; the caller gives its window room back.
func (it *Item) park() {
	it.parked = true
	it.Value = nil
	it.Skip = nil
}

// parkBeyondShare marks l as retrying and parks its queued items beyond
// the share that are validated (a validator may still be reading the
// others), giving their window room back.
func (ls *Lanes) parkBeyondShare(l *lane) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l.retrying = true
	kept, parked := 0, 0
	for _, it := range l.queue {
		switch {
		case it.parked:
		case kept < ls.cfg.RetryingShare || !isClosed(it.validated):
			kept++
		default:
			it.park()
			ls.window.release(it.Size)
			l.held--
			parked++
		}
	}
	ls.world.Parked(parked)
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// reread fills in the values of parked items, all of one partition,
// retrying with backoff until it succeeds or ctx is done, and validates
// them. A record no longer in the log (retention deleted it while it was
// parked) becomes a client error: it cannot be pushed.
func (ls *Lanes) reread(ctx context.Context, batch []*Item) error {
	offsets := make([]int64, len(batch))
	for i, it := range batch {
		offsets[i] = it.Offset
	}
	p := batch[0].Partition
	var values map[int64][]byte
	for attempt := 0; ; attempt++ {
		var err error
		values, err = ls.world.Rereader.Reread(ctx, p, offsets)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		delay := ls.cfg.Backoff.Delay(attempt, 0)
		ls.world.Logger.Warn("reading parked records again failed: retrying", "partition", p,
			"from", offsets[0], "to", offsets[len(offsets)-1], "err", err, "retry_in", delay.Round(time.Millisecond))
		ls.world.Sleep(ctx, delay)
	}
	for _, it := range batch {
		v, ok := values[it.Offset]
		if !ok {
			it.Skip = &Skip{Cause: "expired", Reason: "the record was deleted from Kafka while its tenant was being retried"}
			continue
		}
		it.Value = v
		ls.world.Validate(it)
	}
	ls.world.Reread(len(batch))
	return nil
}

// unpark takes window room for a re-read item again. Without room now it
// waits for some only when wait is set (nothing of the lane is in flight
// whose answer would make room); it reports whether it took the room.
func (ls *Lanes) unpark(ctx context.Context, it *Item, wait bool) (bool, error) {
	if !ls.window.tryAcquire(it.Size) {
		if !wait {
			return false, nil
		}
		if err := ls.window.acquire(ctx, it.Size); err != nil {
			return false, err
		}
	}
	it.parked = false
	return true, nil
}
