package lane

import (
	"context"
	"errors"
	"sync"
	"time"
)

// A record's way through its tenant's lane, in the order it passes: Add
// takes room for it in the window (or parks it) and queues it on its
// lane; the lane's goroutine (deliver) sends it in offset order once it is
// validated and waits for its answer; settle acts on the answer, and
// finish gives the room back and tells World.Finish. Parking a failing
// tenant's records, and reading them again, is in item.go.

// Add hands a fetched record to its tenant's lane. A record of a tenant
// being retried, or still behind parked records, beyond its share, is
// parked: it takes no window room and is read again when its turn comes.
// Any other waits for window room, which is what slows fetching down, and
// must then be validated by the caller, who calls Validated; Add reports
// which (true: validate it).
// admit is called once the room is taken (the caller records the offset
// as pending); when it returns false the record is refused.
func (ls *Lanes) Add(ctx context.Context, it *Item, admit func() bool) (validate bool, err error) {
	it.validated = make(chan struct{})
	parked := ls.crowded(it.Tenant)
	if !parked {
		if err := ls.window.acquire(ctx, it.Size); err != nil {
			return false, err
		}
	}
	if !admit() {
		if !parked {
			ls.window.release(it.Size)
		}
		return false, nil
	}
	if parked {
		ls.world.Parked(1)
		it.park()
		close(it.validated) // validated when read again
	}
	ls.enqueue(it)
	return !parked, nil
}

// Validated marks the item's validation done: its lane may send it (or
// skip it when Skip is set).
func (it *Item) Validated() { close(it.validated) }

// crowded reports whether tenant's next record is parked: its lane holds
// its share of records in memory and is retrying, or still has parked
// records queued. Those are read again one batch at a time, much slower
// than the partition is fetched, and a record behind them cannot be sent
// before them: kept in memory, the tenant's new records would fill the
// window after its recovery and stall the other tenants, as its failure
// would have.
func (ls *Lanes) crowded(tenant string) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l, ok := ls.m[tenant]
	return ok && (l.retrying || len(l.queue) > l.held) && l.held >= ls.cfg.RetryingShare
}

// enqueue appends it to its tenant's lane, starting the lane if idle.
func (ls *Lanes) enqueue(it *Item) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l, ok := ls.m[it.Tenant]
	if !ok {
		l = &lane{tenant: it.Tenant}
		ls.m[it.Tenant] = l
		ls.running.Go(func() { ls.deliver(ls.ctx, l) })
	}
	l.queue = append(l.queue, it)
	if !it.parked {
		l.held++
	}
	if l.wakeOnAdd {
		l.wakeOnAdd = false
		select {
		case l.wake <- struct{}{}:
		default: // a signal is already pending
		}
	}
}

// window bounds what is in flight, in records and in bytes of record
// values: Add (and unpark) take room, finish (and parking) give it back.
// The fetch loop acquires before handing a record on, so a slow pusher
// slows fetching and memory stays bounded.
type window struct {
	maxCount, maxBytes int

	mu      sync.Mutex
	count   int
	bytes   int
	changed chan struct{} // closed and replaced on every release
}

func newWindow(maxCount, maxBytes int) *window {
	return &window{maxCount: maxCount, maxBytes: maxBytes, changed: make(chan struct{})}
}

// acquire takes room for one record of n bytes, waiting until there is
// room or ctx is done. A record larger than the whole byte bound is let in
// when the window is empty, so it cannot block forever.
func (w *window) acquire(ctx context.Context, n int) error {
	for {
		ok, changed := w.take(n)
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// tryAcquire takes room for one record of n bytes if there is room now.
func (w *window) tryAcquire(n int) bool {
	ok, _ := w.take(n)
	return ok
}

// take takes room for n bytes if there is room, else returns the channel
// closed on the next release.
func (w *window) take(n int) (bool, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.count < w.maxCount && (w.bytes+n <= w.maxBytes || w.count == 0) {
		w.count++
		w.bytes += n
		return true, nil
	}
	return false, w.changed
}

// release returns the room of one record of n bytes.
func (w *window) release(n int) {
	w.mu.Lock()
	w.count--
	w.bytes -= n
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

// usage returns the records and bytes in flight.
func (w *window) usage() (count, bytes int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.count, w.bytes
}

// delivery is the state of one lane's goroutine: the tenant's requests in
// flight, in the order sent, and the ones to send again.
type delivery struct {
	inflight []flight
	// failed are items answered SERVER_ERROR or lost with a stream, in
	// order; once there is one, nothing new is sent until every request in
	// flight is answered and the lane has backed off.
	failed []*Item
	// resend are failed items to send again, before any new item.
	resend []*Item
	// reread are parked items whose values were read again, next after
	// resend; they take window room again when sent.
	reread []*Item
	// head is the lane's next item, taken off its queue while requests
	// were in flight and not validated yet: it goes after resend, before
	// reread and the queue.
	head *Item
	// wake is what the goroutine waits for besides its oldest answer,
	// set by fill: head's validation, or the lane's next item when the
	// queue was empty with one request in flight; nil when nothing new
	// may be sent before an answer (more in flight, no room in flight, a
	// failure round, a broken stream, a re-read record waiting for
	// window room).
	wake    <-chan struct{}
	attempt int           // consecutive rounds of failures
	hint    time.Duration // the largest retry-after hint of this round
	cause   string        // of the round's first failure, for the log
	err     error
}

// flight is one item pushed and waiting for its answer.
type flight struct {
	it   *Item
	call Call
}

// deliver is the goroutine of lane l: it pushes the lane's items in
// offset order, keeping up to Config.InflightPerTenant in flight, until
// each is acknowledged OK or as a client error. Server errors and broken
// streams are retried with backoff for as long as ctx allows: the failed
// item and every item sent after it go again, in order, carrying the same
// sequence numbers, so the pusher (which refuses what follows a failure)
// applies the tenant's requests in order. An item that is not finished is
// never committed past.
//
// Between sends it waits for its oldest answer or, while exactly one
// request is in flight and no failure round is open, for its next item,
// whichever comes first. A lightly loaded tenant's record that arrives
// while its previous one is in flight so goes at once rather than a round
// trip later. With more in flight the tenant is busy: its new records
// wait for the oldest answer and then go together, in one stream message,
// and the pusher's TSDB applies them with one commit. Woken by every
// record, a busy lane sent them one by one, and the pipeline of 1,000
// small tenants on the TSDB lost half its throughput (docs/benchmarks.md,
// "The lane's wake on a new record, bounded").
func (ls *Lanes) deliver(ctx context.Context, l *lane) {
	var d delivery
	for {
		if !ls.fill(ctx, l, &d) {
			ls.abandon(l)
			return
		}
		if len(d.inflight) == 0 {
			if d.head == nil && len(d.resend) == 0 && len(d.reread) == 0 && ls.retire(l) {
				return
			}
			continue
		}
		f := d.inflight[0]
		answer, woken, err := f.call.Wait(ctx, d.wake)
		if ctx.Err() != nil {
			ls.abandon(l)
			return
		}
		if woken {
			continue
		}
		d.inflight[0] = flight{}
		d.inflight = d.inflight[1:]
		ls.settle(ctx, l, f.it, answer, err, &d)
		if len(d.inflight) == 0 && len(d.failed) > 0 {
			ls.backOff(ctx, l, &d)
		}
	}
}

// fill sends items until the lane has its share in flight, it is out of
// items, or a failure waits for its round to end, and sets d.wake. It
// returns false when ctx is done.
func (ls *Lanes) fill(ctx context.Context, l *lane, d *delivery) bool {
	d.wake = nil
	for len(d.failed) == 0 && len(d.inflight) < ls.cfg.InflightPerTenant {
		it, err := ls.next(ctx, l, d)
		if err != nil {
			return false
		}
		if it == nil {
			return true
		}
		if len(d.inflight) == 0 {
			select {
			case <-it.validated:
			case <-ctx.Done():
				return false
			}
		} else if !isClosed(it.validated) {
			// The answers in flight need not wait for its validation:
			// the lane waits for whichever comes first.
			d.head, d.wake = it, it.validated
			return true
		}
		if it.Skip != nil {
			ls.skip(ctx, it, it.Skip.Cause, it.Skip.Reason)
			continue
		}
		var prev Call
		if len(d.inflight) > 0 {
			prev = d.inflight[0].call
		}
		call := ls.world.Sender.Send(ctx, prev, it, ls.sequenceOf(it))
		if call == nil {
			// The stream of the requests in flight is gone: their answers
			// (errors) come first, then this item goes again with them.
			d.resend = append([]*Item{it}, d.resend...)
			return true
		}
		d.inflight = append(d.inflight, flight{it: it, call: call})
	}
	return ctx.Err() == nil
}

// next returns the item to send next: a failed one first, then the one
// taken before its validation, then one read again, else the lane's next;
// nil when there is none (d.wake is then the lane's next item when one
// request is in flight), or when a reread item has no window room yet
// and answers in flight will make some. It fails only when ctx is done.
func (ls *Lanes) next(ctx context.Context, l *lane, d *delivery) (*Item, error) {
	if len(d.resend) > 0 {
		it := d.resend[0]
		d.resend[0] = nil
		d.resend = d.resend[1:]
		return it, nil
	}
	if it := d.head; it != nil {
		d.head = nil
		return it, nil
	}
	if len(d.reread) == 0 {
		it, wake := ls.pop(l, len(d.inflight) == 1)
		if it == nil || !it.parked {
			d.wake = wake
			return it, nil
		}
		batch := append([]*Item{it}, ls.popParked(l, it.Partition, ls.cfg.RetryingShare-1, ls.cfg.WindowBytes/4-it.Size)...)
		if err := ls.reread(ctx, batch); err != nil {
			return nil, err
		}
		d.reread = batch
	}
	it := d.reread[0]
	if ok, err := ls.unpark(ctx, it, len(d.inflight) == 0); !ok {
		return nil, err
	}
	d.reread[0] = nil
	d.reread = d.reread[1:]
	return it, nil
}

// pop takes the next item off l, or returns nil when l is empty. With
// wake set, an empty l returns the channel the next item queued signals
// (see lane.wakeOnAdd); the lane's goroutine waits on it.
func (ls *Lanes) pop(l *lane, wake bool) (*Item, <-chan struct{}) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if len(l.queue) > 0 {
		return l.popHead(), nil
	}
	if !wake {
		return nil, nil
	}
	if l.wake == nil {
		l.wake = make(chan struct{}, 1)
	}
	l.wakeOnAdd = true
	return nil, l.wake
}

// popParked takes the parked items of partition p at the head of l, up to
// n of them and bytes bytes of values.
func (ls *Lanes) popParked(l *lane, p int32, n, bytes int) []*Item {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var out []*Item
	for len(out) < n && len(l.queue) > 0 && l.queue[0].parked && l.queue[0].Partition == p && l.queue[0].Size <= bytes {
		bytes -= l.queue[0].Size
		out = append(out, l.popHead())
	}
	return out
}

// popHead takes the first item off a non-empty queue. The caller holds
// the lanes' lock.
func (l *lane) popHead() *Item {
	it := l.queue[0]
	l.queue[0] = nil
	l.queue = l.queue[1:]
	if !it.parked {
		l.held--
	}
	return it
}

// sequenceOf returns its place in the requests, given when it is first
// sent and kept when it is sent again: the pusher tells a resent request
// from a new one by it.
func (ls *Lanes) sequenceOf(it *Item) uint64 {
	if it.sequence == 0 {
		it.sequence = ls.sequence.Add(1)
	}
	return it.sequence
}

// settle acts on one answer: OK finishes the item, a client error skips
// it, anything else marks it failed.
func (ls *Lanes) settle(ctx context.Context, l *lane, it *Item, a Answer, err error, d *delivery) {
	var cause string
	switch {
	case err != nil:
		cause = "stream_error"
	case a.Status == OK:
		ls.world.Ack("ok")
		ls.finish(it)
		if len(d.failed) == 0 && d.attempt > 0 {
			d.attempt = 0
			ls.stopRetrying(l)
		}
		return
	case a.Status == ClientError:
		ls.world.Ack("client_error")
		ls.skip(ctx, it, "rejected", a.Reason)
		return
	default: // ServerError, and any status this version does not know
		cause = "server_error"
		err = errors.New(a.Reason)
		d.hint = max(d.hint, a.RetryAfter)
	}
	ls.world.Ack(cause)
	ls.world.Retry(cause)
	if len(d.failed) == 0 {
		d.cause, d.err = cause, err
	}
	d.failed = append(d.failed, it)
}

// skip hands a client error to World.Skip and finishes the item once it
// was handled.
func (ls *Lanes) skip(ctx context.Context, it *Item, cause, reason string) {
	if ls.world.Skip(ctx, it, cause, reason) {
		ls.finish(it)
	}
}

// finish marks an item acknowledged, gives its window room back, and
// tells World.Finish: its offset may now be committed.
func (ls *Lanes) finish(it *Item) {
	if !it.parked {
		ls.window.release(it.Size)
	}
	ls.world.Finish(it)
	it.Value = nil
}

// backOff ends a round of failures: it waits, then queues the failed items
// to be sent again ahead of the lane's new ones.
func (ls *Lanes) backOff(ctx context.Context, l *lane, d *delivery) {
	delay := ls.cfg.Backoff.Delay(d.attempt, d.hint)
	first := d.failed[0]
	if d.attempt == 0 {
		ls.markFailing(l)
	}
	if d.attempt == 0 || ls.world.AllowLog() {
		ls.world.Logger.Warn("push failed: retrying", "tenant", l.tenant, "partition", first.Partition,
			"offset", first.Offset, "requests", len(d.failed), "attempt", d.attempt+1,
			"retry_in", delay.Round(time.Millisecond), "cause", d.cause, "err", d.err)
	}
	// While the tenant fails, its records beyond its share give their
	// window room to the other tenants. Not for a broken stream: every
	// tenant waits for the next one alike, and parking would only make
	// them all read their records twice.
	if d.cause == "server_error" {
		ls.parkBeyondShare(l)
	}
	// Items not yet resent stay behind the ones that failed again: both
	// lists are in offset order and the failed ones came first.
	d.resend = append(d.failed, d.resend...)
	d.failed, d.hint, d.err = nil, 0, nil
	d.attempt++
	ls.world.Sleep(ctx, delay)
}
