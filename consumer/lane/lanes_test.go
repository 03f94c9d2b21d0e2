package lane

import (
	"slices"
	"testing"
	"time"
)

func TestALaneSendsInOrderWithItsShareInFlight(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		inflight int
		records  int64
		want     int // requests in flight at most
	}{
		{"one request in flight sends one at a time", 1, 20, 1},
		{"three in flight keeps three on the stream", 3, 20, 3},
		{"eight in flight keeps eight on the stream", 8, 20, 8},
		{"a share larger than the queue sends the whole queue", 32, 20, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{InflightPerTenant: tc.inflight, RetryingShare: 4}, answerOK)
			h.add("tenant-0", offsets(0, tc.records)...)
			h.wait()
			if got := h.snd.sentOffsets(); !slices.Equal(got, offsets(0, tc.records)) {
				t.Errorf("sent %v, want offsets in order", got)
			}
			if h.snd.maxOut != tc.want {
				t.Errorf("%d requests in flight at most, want %d", h.snd.maxOut, tc.want)
			}
			for i, s := range h.snd.sent[1:] {
				if s.seq <= h.snd.sent[i].seq {
					t.Fatalf("sequence %d after %d: sequences must grow with the offsets", s.seq, h.snd.sent[i].seq)
				}
			}
			if !slices.Equal(h.finished, offsets(0, tc.records)) || len(h.sleeps) != 0 {
				t.Errorf("finished %v after %d waits, want all in order without a wait", h.finished, len(h.sleeps))
			}
		})
	}
}

// TestAServerErrorBacksOffAndResendsInOrder: offset 2 fails while 3, 4 and
// 5 are in flight behind it, so the pusher refuses them too. The lane must
// back off once, then send 2, 3, 4, 5 again with their sequence numbers,
// before anything new.
func TestAServerErrorBacksOffAndResendsInOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{InflightPerTenant: 4, RetryingShare: 100}, func(s sent, attempt int) Answer {
		if attempt == 0 && s.offset >= 2 && s.offset <= 5 {
			return Answer{Status: ServerError, Reason: "storage failing"}
		}
		return Answer{Status: OK}
	})
	h.add("tenant-0", offsets(0, 10)...)
	h.wait()
	want := []int64{0, 1, 2, 3, 4, 5, 2, 3, 4, 5, 6, 7, 8, 9}
	if got := h.snd.sentOffsets(); !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
	for i := 2; i <= 5; i++ {
		if first, again := h.snd.sent[i], h.snd.sent[i+4]; first.seq != again.seq {
			t.Errorf("offset %d resent with sequence %d, first sent with %d", first.offset, again.seq, first.seq)
		}
	}
	if len(h.sleeps) != 1 || h.sleeps[0] < testBackoff.Min/2 || h.sleeps[0] > testBackoff.Min {
		t.Errorf("waited %v, want one backoff of [%v, %v]", h.sleeps, testBackoff.Min/2, testBackoff.Min)
	}
	if h.retries["server_error"] != 4 || h.acks["server_error"] != 4 {
		t.Errorf("retries %v, acks %v: want 4 server errors", h.retries, h.acks)
	}
	if !slices.Equal(h.finished, offsets(0, 10)) {
		t.Errorf("finished %v, want 0..9 in order", h.finished)
	}
}

func TestAClientErrorIsSkippedNotRetried(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		rejected  bool // the pusher rejects offset 3
		invalid   bool // offset 3 fails validation
		wantSkip  string
		wantSends []int64
	}{
		{"a request the pusher rejects is finished as skipped", true, false, "3:rejected", offsets(0, 10)},
		{"a record that fails validation is skipped without being sent", false, true, "3:undecodable", []int64{0, 1, 2, 4, 5, 6, 7, 8, 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{InflightPerTenant: 2, RetryingShare: 4}, func(s sent, _ int) Answer {
				if tc.rejected && s.offset == 3 {
					return Answer{Status: ClientError, Reason: "out of order sample"}
				}
				return Answer{Status: OK}
			})
			h.invalid[3] = tc.invalid
			h.add("tenant-0", offsets(0, 10)...)
			h.wait()
			if !slices.Equal(h.skipped, []string{tc.wantSkip}) {
				t.Errorf("skipped %v, want %s", h.skipped, tc.wantSkip)
			}
			if got := h.snd.sentOffsets(); !slices.Equal(got, tc.wantSends) {
				t.Errorf("sent %v, want %v", got, tc.wantSends)
			}
			// A record skipped before it is sent finishes ahead of the
			// requests in flight: the caller's tracker orders offsets.
			if got := slices.Sorted(slices.Values(h.finished)); !slices.Equal(got, offsets(0, 10)) || len(h.sleeps) != 0 {
				t.Errorf("finished %v after %d waits, want 0..9 without a wait", h.finished, len(h.sleeps))
			}
		})
	}
}

func TestARetryAfterHintSetsTheBackoff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		hint     time.Duration
		min, max time.Duration
	}{
		{"a hint longer than the backoff is waited", 700 * time.Millisecond, 700 * time.Millisecond, 700 * time.Millisecond},
		{"a hint beyond the maximum is capped", time.Hour, testBackoff.Max, testBackoff.Max},
		{"without a hint the backoff decides", 0, testBackoff.Min / 2, testBackoff.Min},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{InflightPerTenant: 1, RetryingShare: 4}, func(s sent, attempt int) Answer {
				if s.offset == 1 && attempt == 0 {
					return Answer{Status: ServerError, Reason: "overloaded", RetryAfter: tc.hint}
				}
				return Answer{Status: OK}
			})
			h.add("tenant-0", offsets(0, 3)...)
			h.wait()
			if len(h.sleeps) != 1 || h.sleeps[0] < tc.min || h.sleeps[0] > tc.max {
				t.Errorf("waited %v, want one wait in [%v, %v]", h.sleeps, tc.min, tc.max)
			}
			if !slices.Equal(h.finished, offsets(0, 3)) {
				t.Errorf("finished %v, want 0..2 in order", h.finished)
			}
		})
	}
}

// TestARetryingTenantParksBeyondItsShareAndReadsThemAgain: offset 0 fails
// twice. While the lane retries, it keeps its share (2) of records in
// memory and parks the rest, as well as a record added meanwhile; once 0
// goes through, the parked records are read again in batches of the share
// and sent in order. Offset 9 left the log while parked: it is skipped.
func TestARetryingTenantParksBeyondItsShareAndReadsThemAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{InflightPerTenant: 1, RetryingShare: 2}, func(s sent, attempt int) Answer {
		if s.offset == 0 && attempt < 2 {
			return Answer{Status: ServerError, Reason: "storage failing"}
		}
		return Answer{Status: OK}
	})
	h.expired[9] = true
	h.onSleep = func(n int) {
		if n != 1 {
			return
		}
		// 0 waits to be resent; 1 and 2 are the share; 3..9 are parked.
		if records, bytes := h.ls.Usage(); records != 3 || bytes != 3*len(value(0)) {
			t.Errorf("window holds %d records of %d bytes while retrying, want 3 of %d", records, bytes, 3*len(value(0)))
		}
		it := &Item{Tenant: "tenant-0", Offset: 10, Value: value(10), Size: len(value(10))}
		if validate, err := h.ls.Add(h.ctx, it, func() bool { return true }); validate || err != nil {
			t.Errorf("a record added while retrying beyond the share was not parked (validate=%v, err=%v)", validate, err)
		}
	}
	h.add("tenant-0", offsets(0, 10)...)
	h.wait()
	if want := []int64{0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 10}; !slices.Equal(h.snd.sentOffsets(), want) {
		t.Fatalf("sent %v, want %v", h.snd.sentOffsets(), want)
	}
	for _, s := range h.snd.sent {
		if s.value != string(value(s.offset)) {
			t.Errorf("offset %d sent with value %q, want %q", s.offset, s.value, value(s.offset))
		}
	}
	if want := [][]int64{{3, 4}, {5, 6}, {7, 8}, {9, 10}}; !slices.EqualFunc(h.rereads, want, slices.Equal) {
		t.Errorf("read again %v, want %v", h.rereads, want)
	}
	if h.parked != 8 || !slices.Equal(h.skipped, []string{"9:expired"}) {
		t.Errorf("parked %d, skipped %v; want 8 parked, 9 expired", h.parked, h.skipped)
	}
	if !slices.Equal(h.finished, offsets(0, 11)) {
		t.Errorf("finished %v, want 0..10 in order", h.finished)
	}
	if records, bytes := h.ls.Usage(); records != 0 || bytes != 0 {
		t.Errorf("window holds %d records of %d bytes after the drain, want none", records, bytes)
	}
}

// TestARecoveredTenantParksBehindItsParkedRecords: tenant-0 failed and
// parked 3..9; 0 went through, so the lane is no longer retrying, but its
// parked records are still being read again. Records of the tenant added
// meanwhile beyond its share are parked too: they could not be sent
// before the parked ones, and kept in memory they would fill the window
// while the re-reads crawl, stalling the partition's other tenants. Once
// no parked record is queued, the tenant's records are held again.
func TestARecoveredTenantParksBehindItsParkedRecords(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{InflightPerTenant: 1, RetryingShare: 2}, func(s sent, attempt int) Answer {
		if s.offset == 0 && attempt < 1 {
			return Answer{Status: ServerError, Reason: "storage failing"}
		}
		return Answer{Status: OK}
	})
	var parkedAdds, heldAdds []int64
	addOne := func(o int64) {
		it := &Item{Tenant: "tenant-0", Offset: o, Value: value(o), Size: len(value(o))}
		validate, err := h.ls.Add(h.ctx, it, func() bool { return true })
		if err != nil {
			t.Errorf("add offset %d: %v", o, err)
			return
		}
		if !validate {
			parkedAdds = append(parkedAdds, o)
			return
		}
		heldAdds = append(heldAdds, o)
		h.validate(it)
		it.Validated()
	}
	h.onReread = func(n int, _ []int64) {
		switch n {
		case 1: // 0 went through; 5..9 are still parked.
			for o := int64(10); o < 15; o++ {
				addOne(o)
			}
		case 5: // {14}: nothing parked is queued any more.
			addOne(15)
		}
	}
	h.add("tenant-0", offsets(0, 10)...)
	h.wait()
	if !slices.Equal(heldAdds, []int64{10, 11, 15}) || !slices.Equal(parkedAdds, []int64{12, 13, 14}) {
		t.Errorf("added while re-reading: held %v and parked %v, want 10, 11 held (the share), 12..14 parked, and 15 held once none was parked", heldAdds, parkedAdds)
	}
	if want := [][]int64{{3, 4}, {5, 6}, {7, 8}, {9}, {12, 13}, {14}}; !slices.EqualFunc(h.rereads, want, slices.Equal) {
		t.Errorf("read again %v, want %v", h.rereads, want)
	}
	if want := append([]int64{0}, offsets(0, 16)...); !slices.Equal(h.snd.sentOffsets(), want) {
		t.Errorf("sent %v, want %v", h.snd.sentOffsets(), want)
	}
	if !slices.Equal(h.finished, offsets(0, 16)) {
		t.Errorf("finished %v, want 0..15 in order", h.finished)
	}
}

// TestAStreamBreakResendsEverythingInFlightInOrder: the stream breaks just
// after answering offset 0, with 1, 2 and 3 in flight on it; the lane's
// next send (4) is refused, since it would have gone on a new stream ahead
// of them. All of 1..4 go again, in order, on the next stream, and nothing
// is parked: every tenant waits for the new stream alike.
func TestAStreamBreakResendsEverythingInFlightInOrder(t *testing.T) {
	t.Parallel()
	var h *harness
	h = newHarness(t, Config{InflightPerTenant: 4, RetryingShare: 1}, func(s sent, attempt int) Answer {
		if s.offset == 0 {
			h.snd.breakStream()
		}
		return Answer{Status: OK}
	})
	h.add("tenant-0", offsets(0, 10)...)
	h.wait()
	want := []int64{0, 1, 2, 3, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	if got := h.snd.sentOffsets(); !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
	for _, s := range h.snd.sent[4:] {
		if s.stream != 1 {
			t.Errorf("offset %d resent on stream %d, want the new stream 1", s.offset, s.stream)
		}
	}
	if h.acks["stream_error"] != 3 || h.retries["stream_error"] != 3 || h.parked != 0 || len(h.sleeps) != 1 {
		t.Errorf("acks %v, retries %v, parked %d, waits %d: want 3 stream errors retried after one wait, none parked",
			h.acks, h.retries, h.parked, len(h.sleeps))
	}
	if !slices.Equal(h.finished, offsets(0, 10)) {
		t.Errorf("finished %v, want 0..9 in order", h.finished)
	}
}

// TestARetryingTenantHoldsUpOnlyItself: while tenant-0's lane backs off,
// tenant-1's records, added meanwhile, are all delivered.
func TestARetryingTenantHoldsUpOnlyItself(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{InflightPerTenant: 2, RetryingShare: 4}, func(s sent, attempt int) Answer {
		if s.tenant == "tenant-0" && attempt == 0 {
			return Answer{Status: ServerError, Reason: "storage failing"}
		}
		return Answer{Status: OK}
	})
	otherDone := make(chan struct{})
	h.onFinish = func(it *Item) {
		if it.Tenant == "tenant-1" && it.Offset == 19 {
			close(otherDone)
		}
	}
	h.onSleep = func(n int) {
		if n != 1 {
			return
		}
		for o := int64(10); o < 20; o++ {
			it := &Item{Tenant: "tenant-1", Offset: o, Value: value(o), Size: len(value(o))}
			if _, err := h.ls.Add(h.ctx, it, func() bool { return true }); err != nil {
				t.Errorf("add offset %d: %v", o, err)
				return
			}
			it.Validated()
		}
		select {
		case <-otherDone: // tenant-0 is still in its backoff
		case <-h.ctx.Done():
			t.Error("tenant-1 was not delivered while tenant-0 backed off")
		}
	}
	h.add("tenant-0", offsets(0, 3)...)
	h.wait()
	if got := slices.Sorted(slices.Values(h.finished)); !slices.Equal(got, append(offsets(0, 3), offsets(10, 20)...)) {
		t.Errorf("finished %v, want both tenants' records", got)
	}
}
