package lane

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/backoff"
)

// sent is one request as the fake pusher saw it.
type sent struct {
	tenant string
	offset int64
	seq    uint64
	stream int // the stream it went on
	value  string
}

// fakeSender is a pusher whose answers a test decides, one request at a
// time, when the lane waits for them. Streams are numbered: breaking one
// fails every call still on it and refuses sends after its calls.
type fakeSender struct {
	answer func(s sent, attempt int) Answer
	// hold, when set before the lane starts, may hold a request's answer
	// back: the lane's Wait blocks until the channel returned is closed,
	// its wake is ready or ctx is done. Each such Wait is reported on
	// waits, and each send on sends, when they are set (see holding).
	hold  func(s sent, attempt int) <-chan struct{}
	waits chan sent
	sends chan sent

	mu          sync.Mutex
	gate        chan struct{} // sends wait for it while not nil; see harness.add
	stream      int
	sent        []sent
	attempts    map[int64]int // sends per offset so far
	outstanding int           // sent and not yet waited for
	maxOut      int
}

type fakeCall struct {
	f *fakeSender
	s sent
	n int // which send of its offset this is, from 0
}

func (f *fakeSender) Send(ctx context.Context, prev Call, it *Item, seq uint64) Call {
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if prev != nil && prev.(*fakeCall).s.stream != f.stream {
		return nil
	}
	s := sent{tenant: it.Tenant, offset: it.Offset, seq: seq, stream: f.stream, value: string(it.Value)}
	f.sent = append(f.sent, s)
	n := f.attempts[it.Offset]
	f.attempts[it.Offset] = n + 1
	f.outstanding++
	f.maxOut = max(f.maxOut, f.outstanding)
	if f.sends != nil {
		f.sends <- s
	}
	return &fakeCall{f: f, s: s, n: n}
}

// breakStream ends the open stream: its calls fail from now on.
func (f *fakeSender) breakStream() {
	f.mu.Lock()
	f.stream++
	f.mu.Unlock()
}

func (c *fakeCall) Wait(ctx context.Context, wake <-chan struct{}) (Answer, bool, error) {
	if c.f.hold != nil {
		if held := c.f.hold(c.s, c.n); held != nil {
			// A wake already signalled wins over an answer released
			// later: a test that queues an item and then releases an
			// answer sees what the lane does with the item first.
			select {
			case <-wake:
				return Answer{}, true, nil
			default:
			}
			if c.f.waits != nil {
				c.f.waits <- c.s
			}
			select {
			case <-held:
			case <-wake:
				return Answer{}, true, nil
			case <-ctx.Done():
				return Answer{}, false, ctx.Err()
			}
		}
	}
	c.f.mu.Lock()
	c.f.outstanding--
	broken := c.s.stream != c.f.stream
	c.f.mu.Unlock()
	if broken {
		return Answer{}, false, fmt.Errorf("stream %d broke", c.s.stream)
	}
	return c.f.answer(c.s, c.n), false, nil
}

func (f *fakeSender) sentOffsets() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]int64, len(f.sent))
	for i, s := range f.sent {
		out[i] = s.offset
	}
	return out
}

// harness runs lanes against a fakeSender, a fake log for re-reads and a
// fake clock that records every wait and returns at once.
type harness struct {
	t   *testing.T
	ctx context.Context
	ls  *Lanes
	snd *fakeSender
	// onSleep, when set, runs in the lane's goroutine at each backoff.
	onSleep func(n int)
	// onFinish, when set, runs at each finished item.
	onFinish func(it *Item)
	// onReread, when set, runs in the lane's goroutine at each re-read,
	// before the values are returned.
	onReread func(n int, offsets []int64)
	// invalid offsets fail validation.
	invalid map[int64]bool
	// expired offsets are missing from the log when read again.
	expired map[int64]bool

	mu       sync.Mutex
	finished []int64
	skipped  []string // "offset:cause"
	acks     map[string]int
	retries  map[string]int
	parked   int
	sleeps   []time.Duration
	rereads  [][]int64
}

// testBackoff's delays are recognisable: [5, 10] ms, then [10, 20] ms...
var testBackoff = backoff.Policy{Min: 10 * time.Millisecond, Max: time.Second}

func newHarness(t *testing.T, cfg Config, answer func(s sent, attempt int) Answer) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	if cfg.WindowRecords == 0 {
		cfg.WindowRecords, cfg.WindowBytes = 1000, 1<<20
	}
	cfg.Backoff = testBackoff
	h := &harness{
		t: t, ctx: ctx,
		snd:     &fakeSender{answer: answer, attempts: map[int64]int{}},
		invalid: map[int64]bool{}, expired: map[int64]bool{},
		acks: map[string]int{}, retries: map[string]int{},
	}
	h.ls = New(cfg, World{
		Sender:   h.snd,
		Rereader: RereadFunc(h.reread),
		Validate: h.validate,
		Skip: func(_ context.Context, it *Item, cause, _ string) bool {
			h.mu.Lock()
			h.skipped = append(h.skipped, fmt.Sprintf("%d:%s", it.Offset, cause))
			h.mu.Unlock()
			return true
		},
		Finish: func(it *Item) {
			h.mu.Lock()
			h.finished = append(h.finished, it.Offset)
			h.mu.Unlock()
			if h.onFinish != nil {
				h.onFinish(it)
			}
		},
		Ack:    func(s string) { h.mu.Lock(); h.acks[s]++; h.mu.Unlock() },
		Retry:  func(s string) { h.mu.Lock(); h.retries[s]++; h.mu.Unlock() },
		Parked: func(n int) { h.mu.Lock(); h.parked += n; h.mu.Unlock() },
		Sleep: func(_ context.Context, d time.Duration) {
			h.mu.Lock()
			h.sleeps = append(h.sleeps, d)
			n := len(h.sleeps)
			h.mu.Unlock()
			if h.onSleep != nil {
				h.onSleep(n)
			}
		},
	})
	h.ls.Start(ctx)
	return h
}

// value is the record value of offset o in the fake log.
func value(o int64) []byte { return []byte(fmt.Sprintf("record-%03d", o)) }

func (h *harness) validate(it *Item) {
	if h.invalid[it.Offset] {
		it.Skip = &Skip{Cause: "undecodable", Reason: "not a write request"}
	}
}

func (h *harness) reread(_ context.Context, _ int32, offsets []int64) (map[int64][]byte, error) {
	h.mu.Lock()
	h.rereads = append(h.rereads, slices.Clone(offsets))
	n := len(h.rereads)
	h.mu.Unlock()
	if h.onReread != nil {
		h.onReread(n, offsets)
	}
	out := map[int64][]byte{}
	for _, o := range offsets {
		if !h.expired[o] {
			out[o] = value(o)
		}
	}
	return out, nil
}

// add adds tenant's records at offsets, then validates them all at once;
// the lane's sends wait until then (a lane that finds an item not yet
// validated takes an answer meanwhile), so how many requests it has in
// flight does not depend on the scheduler.
func (h *harness) add(tenant string, offsets ...int64) {
	h.t.Helper()
	gate := make(chan struct{})
	h.snd.mu.Lock()
	h.snd.gate = gate
	h.snd.mu.Unlock()
	defer close(gate)
	var added []*Item
	for _, o := range offsets {
		it := &Item{Tenant: tenant, Offset: o, Value: value(o), Size: len(value(o))}
		validate, err := h.ls.Add(h.ctx, it, func() bool { return true })
		if err != nil {
			h.t.Fatalf("add offset %d: %v", o, err)
		}
		if validate {
			added = append(added, it)
		}
	}
	for _, it := range added {
		h.validate(it)
		it.Validated()
	}
}

// wait waits until every lane is empty.
func (h *harness) wait() {
	h.t.Helper()
	if !h.ls.Wait(h.ctx) {
		h.t.Fatal("the lanes did not drain within 5 s")
	}
}

func offsets(from, to int64) []int64 {
	var out []int64
	for o := from; o < to; o++ {
		out = append(out, o)
	}
	return out
}

func answerOK(sent, int) Answer { return Answer{Status: OK} }
