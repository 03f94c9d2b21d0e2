package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestGracefulShutdownWithSlowPusher SIGTERMs a consumer process with
// -shutdown-timeout=5s while it has a backlog the pusher cannot absorb in
// that time: the in-process pusher's backend takes 50ms per request, so the
// consumer's 4 tenant lanes push about 80 records/s and its window of 512
// fetched records needs over 6s. It proves:
//   - the consumer exits with status 0 within the shutdown timeout plus a
//     small margin for the final sync and commit;
//   - its final commit is exactly its watermark: every record below the
//     committed offset was applied by the pusher, and the committed offset
//     is the first offset the pusher had not applied, except that a lane's
//     last ack may have been cut off in transit by the timeout (the test
//     knows which acks surely arrived: those the lane followed with its
//     next request, which it sends only after the answer, with
//     -consumer.max-inflight-per-tenant=1);
//   - a restarted consumer continues from there: it never re-sends a record
//     below the committed offset, and in the end every record is applied.
func TestGracefulShutdownWithSlowPusher(t *testing.T) {
	sc := currentScale()
	const partitions, tenants, series = 1, 4, 2
	const shutdownTimeout, margin = 5 * time.Second, 3 * time.Second
	pl := newPipeline(t, partitions, tenants, series)
	steps := sc.shutdownRecords / tenants
	produced := int64(steps * tenants)

	be := newRecBackend()
	be.delay.Store(int64(50 * time.Millisecond))
	addr := startInprocPusher(t, be)
	pr := pl.newProducer()
	if err := pr.produce(context.Background(), 0, steps, 0); err != nil {
		t.Fatal(err)
	}
	// One request of a tenant in flight at a time: only then does a
	// request prove that the answer of the one before it reached the
	// consumer, which is how the test tells the acks that surely arrived
	// (below). With the default, 16, a lane sends ahead of its answers.
	c := pl.startConsumers(addr, "-consumer.max-inflight-per-tenant=1")[0] // -shutdown-timeout=5s
	waitFor(t, 30*time.Second, "the consumer to be under way", func() bool { return be.appliedCount() >= 40 })

	c.mark("SIGTERM")
	appliedAtTerm := be.appliedCount()
	termAt := time.Now()
	c.signal(syscall.SIGTERM)
	st := c.wait(shutdownTimeout + 30*time.Second)
	exitedIn := time.Since(termAt)
	if st == nil {
		t.Fatalf("consumer still running %s after SIGTERM", exitedIn.Round(time.Millisecond))
	}
	if st.ExitCode() != 0 {
		t.Errorf("consumer exited with %v after SIGTERM, want status 0", st)
	}
	if exitedIn > shutdownTimeout+margin {
		t.Errorf("consumer took %s to exit after SIGTERM, more than -shutdown-timeout=%s + %s", exitedIn.Round(time.Millisecond), shutdownTimeout, margin)
	}
	timedOut := len(c.logLines("shutdown timeout")) > 0

	committed, ok := pl.committed()[0]
	if !ok {
		t.Fatal("nothing committed after the graceful stop")
	}
	applied, _, canceled := be.snapshot()
	ackedAt := map[int64]bool{}
	for _, ev := range applied {
		o, ok := pr.offset(ev.tenant, ev.step)
		if !ok {
			t.Fatalf("applied a record never produced: %s step %d", ev.tenant, ev.step)
		}
		ackedAt[o] = true
	}
	// Which acks surely reached the consumer? A lane sends its next request
	// only after it finished the previous one, so an ack followed by another
	// request of the same tenant (applied, or cut off in flight by the
	// shutdown) was received and finished before the stream was cancelled,
	// hence before the final commit. Only each lane's last ack is in doubt:
	// the timeout may have cut the stream while it travelled.
	lastAck := map[string]applyEvent{}
	for _, ev := range applied {
		lastAck[ev.tenant] = ev
	}
	inDoubt := map[int64]bool{}
	for tenant, ev := range lastAck {
		followed := false
		for _, cv := range canceled {
			if cv.tenant == tenant && cv.step > ev.step {
				followed = true
			}
		}
		if !followed {
			o, _ := pr.offset(tenant, ev.step)
			inDoubt[o] = true
		}
	}
	// watermark: the first offset not applied (optionally: or in doubt).
	watermark := func(skipDoubt bool) int64 {
		o := int64(0)
		for ackedAt[o] && !(skipDoubt && inDoubt[o]) {
			o++
		}
		return o
	}
	wmAll, wmSure := watermark(false), watermark(true)
	if committed > wmAll {
		t.Fatalf("committed %d, but the pusher never applied offset %d: a commit ahead of the acknowledgements loses data", committed, wmAll)
	}
	if committed < wmSure {
		t.Errorf("committed %d, below the watermark %d of the records whose acknowledgement surely reached the consumer: the final commit is not the watermark", committed, wmSure)
	}
	var logged string
	if lines := c.logLines("consumer stopped"); len(lines) > 0 {
		logged = lines[len(lines)-1]
		if want := fmt.Sprintf("committed=map[0:%d]", committed); !strings.Contains(logged, want) {
			t.Errorf("consumer's last words %q do not name the committed offset %d", logged, committed)
		}
	} else {
		t.Errorf("consumer did not log its stop")
	}
	t.Logf("SIGTERM after %d records applied, %d applied in all, %d in flight when the stream was cut; exited in %s (shutdown timeout hit: %v); committed %d, watermark %d (%d without the %d acks in doubt)",
		appliedAtTerm, len(applied), len(canceled), exitedIn.Round(time.Millisecond), timedOut, committed, wmAll, wmSure, len(inDoubt))

	// Restart at full speed: it must continue at the committed offset.
	be.delay.Store(0)
	before := len(applied)
	c.start()
	c.waitReady(time.Minute)
	final := pl.waitCommittedToEnd(2 * time.Minute)
	applied, _, _ = be.snapshot()
	var resent []int64
	replayed := int64(0)
	for _, ev := range applied[before:] {
		o, _ := pr.offset(ev.tenant, ev.step)
		if o < committed {
			resent = append(resent, o)
		} else if ackedAt[o] {
			replayed++
		}
	}
	if len(resent) > 0 {
		slices.Sort(resent)
		t.Errorf("restarted consumer re-sent %d records below the committed offset %d (first %d): it must continue from the commit", len(resent), committed, resent[0])
	}
	above := int64(0) // records at or above the commit the pusher had applied before the restart
	for o := range ackedAt {
		if o >= committed {
			above++
		}
	}
	if replayed > above {
		t.Errorf("restarted consumer re-applied %d records, more than the %d applied at or above the committed offset before the stop", replayed, above)
	}
	lost, duplicates := be.missing(tenants, steps)
	if lost != 0 {
		t.Errorf("%d records never applied", lost)
	}
	t.Logf("restarted consumer finished at %s, re-sending %d records already applied", formatOffsets(final), replayed)
	report(t, outcome{
		name: "graceful-shutdown", produced: produced, delivered: produced - lost, lost: lost, duplicates: duplicates,
		extra: fmt.Sprintf("exit_seconds=%.1f committed=%d watermark=%d timeout_hit=%v", exitedIn.Seconds(), committed, wmAll, timedOut),
	})
}
