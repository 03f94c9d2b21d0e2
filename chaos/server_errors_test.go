package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/loadgen"
)

// TestPusherServerErrorsForTenSeconds makes the pusher answer SERVER_ERROR
// to one tenant's requests for a while (10s at the large scale, shorter by
// default). The pusher runs in the test process with a recording backend
// that returns a plain error, which the pusher classifies as SERVER_ERROR
// with its default retry-after hint of 500ms; the consumers are processes.
// It proves:
//   - the committed offset of the failing partition stays exactly at the
//     failing record during the whole window: everything before it is
//     committed, nothing past it;
//   - the failing tenant holds up only itself: the other tenant of that
//     partition and the other partition are delivered meanwhile;
//   - the retries follow the backoff schedule, no hot loop: every gap
//     between two attempts lies within what -consumer.backoff-min/-max,
//     the jitter and the hint allow for that attempt, so the gaps grow to
//     the -consumer.backoff-max range and the attempts per window are few;
//   - after recovery the record is applied within one backoff step and
//     every record arrives; every partition is committed to its end.
func TestPusherServerErrorsForTenSeconds(t *testing.T) {
	sc := currentScale()
	const partitions, tenants, series = 2, 4, 2
	const phase1, phase2 = 100, 150 // steps before and after the failure starts
	const retryHint = 500 * time.Millisecond

	pl := newPipeline(t, partitions, tenants, series)
	be := newRecBackend()
	addr := startInprocPusher(t, be)
	pl.startConsumers(addr)
	pr := pl.newProducer()
	ctx := context.Background()

	if err := pr.produce(ctx, 0, phase1, 0); err != nil {
		t.Fatal(err)
	}
	pl.waitCommittedToEnd(time.Minute)

	failTenant := loadgen.Tenant(0) // partition 0, with tenant-2
	failOffset := pl.ends()[0]      // phase 2 starts with tenant-0's record on partition 0
	be.setFailing(func(tenant string, step int) bool { return tenant == failTenant && step >= phase1 })
	if err := pr.produce(ctx, phase1, phase1+phase2, 0); err != nil {
		t.Fatal(err)
	}
	if o, _ := pr.offset(failTenant, phase1); o != failOffset {
		t.Fatalf("tenant %s step %d landed at offset %d, want %d", failTenant, phase1, o, failOffset)
	}
	ends := pl.ends()

	var windowStart time.Time
	waitFor(t, 30*time.Second, "the first injected server error", func() bool {
		_, failures, _ := be.snapshot()
		if len(failures) > 0 {
			windowStart = failures[0].at
			return true
		}
		return false
	})
	// During the window: partition 0 committed exactly up to the failing
	// record, never past it.
	var polls int
	for time.Since(windowStart) < sc.errorWindow {
		c := pl.committed()
		polls++
		if c[0] > failOffset {
			t.Fatalf("partition 0 committed %d past the failing record at offset %d", c[0], failOffset)
		}
		time.Sleep(250 * time.Millisecond)
	}
	c := pl.committed()
	if c[0] != failOffset {
		t.Errorf("after %s of server errors partition 0 is committed at %d, want exactly the failing record's offset %d", sc.errorWindow, c[0], failOffset)
	}
	// Meanwhile the rest flows: the other partition is committed to its end
	// and the other tenant of partition 0 is delivered, still without a
	// commit of partition 0 past the failing record.
	tenant2 := func() int {
		applied, _, _ := be.snapshot()
		steps := map[int]bool{}
		for _, ev := range applied {
			if ev.tenant == loadgen.Tenant(2) {
				steps[ev.step] = true
			}
		}
		return len(steps)
	}
	waitFor(t, 30*time.Second, "partition 1 and tenant-2 to be delivered while tenant-0 fails", func() bool {
		c = pl.committed()
		if c[0] > failOffset {
			t.Fatalf("partition 0 committed %d past the failing record at offset %d", c[0], failOffset)
		}
		return c[1] == ends[1] && tenant2() == phase1+phase2
	})
	if time.Since(windowStart) > sc.errorWindow+time.Second {
		t.Logf("note: partition 1 and tenant-2 needed %s after the failure began", time.Since(windowStart).Round(time.Millisecond))
	}
	// Not a failure, but worth seeing: the window bounds unacknowledged
	// records only, so records of other tenants past the stuck one are
	// acknowledged and would all be replayed if the consumer crashed now.
	applied, _, _ := be.snapshot()
	exposure := 0
	for _, ev := range applied {
		if o, _ := pr.offset(ev.tenant, ev.step); pl.tenantPartition(tenantIndex(ev.tenant)) == 0 && o > failOffset {
			exposure++
		}
	}

	// Recover, then everything must arrive.
	be.setFailing(nil)
	recovered := time.Now()
	committed := pl.waitCommittedToEnd(time.Minute)
	applied, failures, _ := be.snapshot()

	var attempts []time.Time
	for _, ev := range failures {
		if ev.tenant != failTenant || ev.step != phase1 {
			t.Errorf("unexpected failed attempt of %s step %d: only the failing record should be tried while its lane is stuck", ev.tenant, ev.step)
			continue
		}
		attempts = append(attempts, ev.at)
	}
	var success time.Time
	for _, ev := range applied {
		if ev.tenant == failTenant && ev.step == phase1 {
			success = ev.at
			break
		}
	}
	if success.IsZero() {
		t.Fatalf("the failing record was never applied after recovery")
	}
	if d := success.Sub(recovered); d > backoffMax+time.Second {
		t.Errorf("the failing record was applied %s after recovery, more than -consumer.backoff-max (%s) plus 1s", d, backoffMax)
	}

	// The schedule: before retry n the consumer waits a delay drawn from
	// [d/2, d], d = min(max, min*2^n), or the pusher's 500ms hint when that
	// is longer (capped at max). The gap between two attempts seen by the
	// backend is that delay plus two trips through the stream.
	const slack = time.Second // scheduling on a busy 2-core machine
	var gaps []string
	all := append(append([]time.Time(nil), attempts...), success)
	for n := 1; n < len(all); n++ {
		gap := all[n].Sub(all[n-1])
		d := backoffMax
		if e := backoffMin << (n - 1); e < backoffMax {
			d = e
		}
		lo, hi := max(d/2, min(retryHint, backoffMax)), max(d, min(retryHint, backoffMax))
		if n == len(all)-1 {
			lo = 0 // the success came once the flag was cleared, mid-delay or after it
		}
		gaps = append(gaps, gap.Round(10*time.Millisecond).String())
		if gap < lo-20*time.Millisecond || gap > hi+slack {
			t.Errorf("retry %d came %s after the previous attempt, outside the backoff schedule [%s, %s] (+%s slack)", n, gap.Round(time.Millisecond), lo, hi, slack)
		}
	}
	inWindow := 0
	for _, a := range attempts {
		if a.Sub(windowStart) <= sc.errorWindow {
			inWindow++
		}
	}
	// No hot loop: attempts are at least the hint apart.
	if limit := int(sc.errorWindow/retryHint) + 1; inWindow > limit {
		t.Errorf("%d attempts within %s of server errors, more than %d: retries are not backing off", inWindow, sc.errorWindow, limit)
	}
	if len(attempts) < 3 {
		t.Errorf("only %d failed attempts in %s: the failure window did not exercise the retries", len(attempts), sc.errorWindow)
	}

	lost, duplicates := be.missing(tenants, phase1+phase2)
	if lost != 0 {
		t.Errorf("%d records never applied", lost)
	}
	produced := int64(tenants * (phase1 + phase2))
	t.Logf("while the commit of partition 0 was held at %d, %d records past it were acknowledged (all would be replayed after a crash)", failOffset, exposure)
	t.Logf("failing record at p0 offset %d: %d attempts (%d in the %s window), gaps %s; committed during the window %d polls at %d; final %s",
		failOffset, len(attempts), inWindow, sc.errorWindow, strings.Join(gaps, " "), polls, c[0], formatOffsets(committed))
	report(t, outcome{
		name: "server-errors", produced: produced, delivered: produced - lost, lost: lost, duplicates: duplicates,
		extra: fmt.Sprintf("error_window=%s attempts=%d", sc.errorWindow, len(attempts)),
	})
}

// tenantIndex is the inverse of loadgen.Tenant.
func tenantIndex(tenant string) int {
	var i int
	if _, err := fmt.Sscanf(tenant, "tenant-%d", &i); err != nil {
		return -1
	}
	return i
}
