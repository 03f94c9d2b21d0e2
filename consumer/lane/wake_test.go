package lane

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// holding makes h's pusher hold back the answers hold returns a channel
// for, and report its sends and held waits.
func (h *harness) holding(hold func(s sent, attempt int) <-chan struct{}) {
	h.snd.hold = hold
	h.snd.waits = make(chan sent, 1000)
	h.snd.sends = make(chan sent, 1000)
}

// expect takes the next report off c and fails the test unless it is of
// offset: what says what the test was waiting for.
func (h *harness) expect(c <-chan sent, offset int64, what string) {
	h.t.Helper()
	select {
	case s := <-c:
		if s.offset != offset {
			h.t.Fatalf("%s: got offset %d, want %d", what, s.offset, offset)
		}
	case <-h.ctx.Done():
		h.t.Fatalf("%s: not within the lanes' 5 s", what)
	}
}

// expectWait skips the held waits on c until one of offset.
func (h *harness) expectWait(offset int64, what string) {
	h.t.Helper()
	for {
		select {
		case s := <-h.snd.waits:
			if s.offset == offset {
				return
			}
		case <-h.ctx.Done():
			h.t.Fatalf("%s: not within the lanes' 5 s", what)
		}
	}
}

// TestARecordGoesWhileAnEarlierOneOfItsTenantIsInFlight: offset 0 is sent
// and its answer held back; offset 1, added while the lane waits for it,
// is sent at once (one request in flight, room for 4) rather than after
// 0's answer, and both finish in order.
func TestARecordGoesWhileAnEarlierOneOfItsTenantIsInFlight(t *testing.T) {
	t.Parallel()
	h, release := holdingOffsetZero(t)
	h.add("tenant-0", 0)
	h.expect(h.snd.sends, 0, "offset 0 sent")
	h.expectWait(0, "the lane waits for offset 0's answer")
	h.add("tenant-0", 1)
	h.expect(h.snd.sends, 1, "offset 1 sent while offset 0 is in flight, unanswered")
	close(release)
	h.wait()
	if got := h.snd.sentOffsets(); !slices.Equal(got, []int64{0, 1}) || h.snd.sent[1].seq <= h.snd.sent[0].seq {
		t.Errorf("sent %+v, want offsets 0 and 1 with growing sequences", h.snd.sent)
	}
	if !slices.Equal(h.finished, []int64{0, 1}) {
		t.Errorf("finished %v, want 0, 1", h.finished)
	}
}

// TestABusyTenantsRecordsGoTogether: offsets 0 and 1 are in flight, 0's
// answer held back; 2 and 3, added meanwhile, wait for that answer and
// then go together (room for 4 in flight), so that the pusher gets them
// in one message and applies them with one commit. Sent at once, each
// would reach the TSDB alone.
func TestABusyTenantsRecordsGoTogether(t *testing.T) {
	t.Parallel()
	h, release := holdingOffsetZero(t)
	h.add("tenant-0", 0, 1)
	h.expect(h.snd.sends, 0, "offset 0 sent")
	h.expect(h.snd.sends, 1, "offset 1 sent beside offset 0")
	h.expectWait(0, "the lane waits for offset 0's answer")
	h.add("tenant-0", 2, 3)
	// A lane that sent a new record at once would do so within
	// microseconds; this grace only makes a wrong lane fail reliably.
	select {
	case s := <-h.snd.sends:
		t.Fatalf("offset %d sent while offsets 0 and 1 were in flight", s.offset)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	h.expect(h.snd.sends, 2, "offset 2 sent after offset 0's answer")
	h.expect(h.snd.sends, 3, "offset 3 sent with offset 2")
	h.wait()
	if got := h.snd.sentOffsets(); !slices.Equal(got, []int64{0, 1, 2, 3}) {
		t.Errorf("sent %v, want 0..3", got)
	}
	if !slices.Equal(h.finished, []int64{0, 1, 2, 3}) {
		t.Errorf("finished %v, want 0..3", h.finished)
	}
}

// TestAnAnswerDoesNotWaitForTheNextRecordsValidation: 0 and 1 are in
// flight, their answers held back; offset 2 is added and not validated.
// Once 0 is answered the lane takes 2 and finds it not validated; 1's
// answer, released meanwhile, finishes 1 before 2 is validated.
func TestAnAnswerDoesNotWaitForTheNextRecordsValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{InflightPerTenant: 4, RetryingShare: 4}, answerOK)
	release := map[int64]chan struct{}{0: make(chan struct{}), 1: make(chan struct{})}
	h.holding(func(s sent, _ int) <-chan struct{} { return release[s.offset] })
	finished := make(chan int64, 3)
	h.onFinish = func(it *Item) { finished <- it.Offset }
	h.add("tenant-0", 0, 1)
	h.expectWait(0, "the lane waits for offset 0's answer")
	it := &Item{Tenant: "tenant-0", Offset: 2, Value: value(2), Size: len(value(2))}
	if _, err := h.ls.Add(h.ctx, it, func() bool { return true }); err != nil {
		t.Fatal(err)
	}
	close(release[0])
	h.expectWait(1, "the lane, offset 2 not validated, waits for offset 1's answer or 2's validation")
	close(release[1])
	for _, want := range []int64{0, 1} {
		select {
		case o := <-finished:
			if o != want {
				t.Fatalf("finished offset %d, want %d", o, want)
			}
		case <-h.ctx.Done():
			t.Fatalf("offset %d's answer waited for offset 2's validation", want)
		}
	}
	it.Validated()
	h.wait()
	if got := h.snd.sentOffsets(); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Errorf("sent %v, want 0, 1, 2", got)
	}
	if !slices.Equal(h.finished, []int64{0, 1, 2}) {
		t.Errorf("finished %v, want 0, 1, 2", h.finished)
	}
}

// TestAFailureRoundSendsNothingNewUntilTheBackoff: 0 and 1 are in flight
// when 0 is answered SERVER_ERROR; offset 2, added while the lane waits
// for 1's answer (the round's last), must not be sent before the backoff:
// the pusher refuses it anyway, and it would go ahead of the resends.
// After the backoff, 0, 1 and 2 go in order, 0 and 1 with their sequences.
func TestAFailureRoundSendsNothingNewUntilTheBackoff(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{InflightPerTenant: 4, RetryingShare: 100}, func(s sent, attempt int) Answer {
		if attempt == 0 && s.offset <= 1 {
			return Answer{Status: ServerError, Reason: "storage failing"}
		}
		return Answer{Status: OK}
	})
	release := map[int64]chan struct{}{0: make(chan struct{}), 1: make(chan struct{})}
	h.holding(func(s sent, attempt int) <-chan struct{} {
		if attempt == 0 && s.offset <= 1 {
			return release[s.offset]
		}
		return nil
	})
	var atBackoff []int64
	h.onSleep = func(n int) {
		if n == 1 {
			atBackoff = h.snd.sentOffsets()
		}
	}
	h.add("tenant-0", 0)
	h.expectWait(0, "the lane waits for offset 0's answer")
	h.add("tenant-0", 1)
	h.expect(h.snd.sends, 0, "offset 0 sent")
	h.expect(h.snd.sends, 1, "offset 1 sent while offset 0 is in flight")
	close(release[0])
	h.expectWait(1, "the lane, offset 0 failed, waits for offset 1's answer")
	// A wake pending when 1's answer comes is taken first by the fake:
	// a lane woken by 2 would send it now.
	h.add("tenant-0", 2)
	close(release[1])
	h.wait()
	if !slices.Equal(atBackoff, []int64{0, 1}) {
		t.Errorf("sent %v by the backoff, want 0, 1: nothing new after a server error", atBackoff)
	}
	if got, want := h.snd.sentOffsets(), []int64{0, 1, 0, 1, 2}; !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
	for i := range 2 {
		if first, again := h.snd.sent[i], h.snd.sent[i+2]; first.seq != again.seq {
			t.Errorf("offset %d resent with sequence %d, first sent with %d", first.offset, again.seq, first.seq)
		}
	}
	if len(h.sleeps) != 1 || !slices.Equal(h.finished, []int64{0, 1, 2}) {
		t.Errorf("%d backoffs, finished %v; want one, then 0, 1, 2", len(h.sleeps), h.finished)
	}
}

// TestRecordsAddedOneByOneGoInOrderWithinTheShare: records of two tenants
// are added one at a time and validated out of order by two workers,
// while the pusher answers each request a few records later, so that
// lanes find records queued, validated or not, as answers come; some
// answers are server errors. Each tenant's requests go in offset order, at most
// its share in flight, and every record finishes once, in order.
func TestRecordsAddedOneByOneGoInOrderWithinTheShare(t *testing.T) {
	t.Parallel()
	// Which of a lane's ways to wait a run takes depends on the
	// scheduler: several runs make each likely.
	for seed := range uint64(4) {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) { addOneByOne(t, seed) })
	}
}

func addOneByOne(t *testing.T, seed uint64) {
	const records, share = 300, 3
	tenants := []string{"tenant-0", "tenant-1"}
	var mu sync.Mutex
	// Like the pusher, it refuses what follows a failed request of the
	// tenant until that one comes again.
	failedAt := map[string]uint64{}
	h := newHarness(t, Config{InflightPerTenant: share, RetryingShare: 1000}, func(s sent, attempt int) Answer {
		mu.Lock()
		defer mu.Unlock()
		if seq, ok := failedAt[s.tenant]; ok {
			if s.seq != seq {
				return Answer{Status: ServerError, Reason: "refused: follows a failed request"}
			}
			delete(failedAt, s.tenant)
		}
		if attempt == 0 && s.offset%37 == 5 {
			failedAt[s.tenant] = s.seq
			return Answer{Status: ServerError, Reason: "storage failing"}
		}
		return Answer{Status: OK}
	})
	released := make([]chan struct{}, records)
	for i := range released {
		released[i] = make(chan struct{})
	}
	h.holding(func(s sent, attempt int) <-chan struct{} {
		if attempt > 0 {
			return nil
		}
		return released[s.offset]
	})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for {
			select {
			case <-h.snd.waits:
			case <-h.snd.sends:
			case <-h.ctx.Done():
				return
			}
		}
	}()
	validate := make(chan *Item, records)
	var validators sync.WaitGroup
	for range 2 {
		validators.Go(func() {
			for it := range validate {
				it.Validated()
			}
		})
	}
	rnd := rand.New(rand.NewPCG(seed, 2))
	var pending []*Item
	answered := 0 // offsets below are released
	for o := range records {
		it := &Item{Tenant: tenants[o%2], Offset: int64(o), Value: value(int64(o)), Size: len(value(int64(o)))}
		if _, err := h.ls.Add(h.ctx, it, func() bool { return true }); err != nil {
			t.Fatal(err)
		}
		// Validation lags behind by a few records, out of order.
		pending = append(pending, it)
		if len(pending) >= 3 || o == records-1 {
			rnd.Shuffle(len(pending), func(i, j int) { pending[i], pending[j] = pending[j], pending[i] })
			for _, it := range pending {
				validate <- it
			}
			pending = pending[:0]
		}
		// Answers lag behind by up to 5 records.
		for ; answered < o-rnd.IntN(6); answered++ {
			close(released[answered])
		}
		// Lets the lanes run between records, as between fetches.
		runtime.Gosched()
	}
	for ; answered < records; answered++ {
		close(released[answered])
	}
	close(validate)
	validators.Wait()
	h.wait()
	if h.snd.maxOut > len(tenants)*share {
		t.Errorf("%d requests in flight at most, want at most %d per tenant", h.snd.maxOut, share)
	}
	last := map[string]int64{"tenant-0": -1, "tenant-1": -1}
	for _, o := range h.finished {
		tenant := tenants[o%2]
		if o <= last[tenant] {
			t.Fatalf("%s finished %d after %d", tenant, o, last[tenant])
		}
		last[tenant] = o
	}
	if len(h.finished) != records {
		t.Errorf("finished %d records, want %d", len(h.finished), records)
	}
	// Each tenant's first sends are in offset order; a failure resends
	// the failed request and the ones after it, again in order.
	for _, tenant := range tenants {
		var first []int64
		byOffset := map[int64]uint64{}
		for _, s := range h.snd.sent {
			if s.tenant != tenant {
				continue
			}
			if seq, ok := byOffset[s.offset]; ok {
				if seq != s.seq {
					t.Errorf("offset %d resent with sequence %d, first %d", s.offset, s.seq, seq)
				}
				continue
			}
			if n := len(first); n > 0 && byOffset[first[n-1]] >= s.seq {
				t.Errorf("%s: offset %d sent with sequence %d after offset %d's %d", tenant, s.offset, s.seq, first[n-1], byOffset[first[n-1]])
			}
			byOffset[s.offset] = s.seq
			first = append(first, s.offset)
		}
		if !slices.IsSorted(first) || len(first) != records/2 {
			t.Errorf("%s: first sends %v, want its %d offsets in order", tenant, first, records/2)
		}
	}
}

// holdingOffsetZero is a harness of one lane with room for 4 in flight
// whose answer to offset 0 waits until release is closed.
func holdingOffsetZero(t *testing.T) (h *harness, release chan struct{}) {
	h = newHarness(t, Config{InflightPerTenant: 4, RetryingShare: 4}, answerOK)
	release = make(chan struct{})
	h.holding(func(s sent, _ int) <-chan struct{} {
		if s.offset == 0 {
			return release
		}
		return nil
	})
	return h, release
}
