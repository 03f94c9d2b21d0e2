package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// checkExactlyOnceInOrder fails unless every tenant 0..tenants-1 got
// exactly the steps 0..steps-1, each once, in increasing order.
func checkExactlyOnceInOrder(t *testing.T, got map[string][]int, tenants, steps int) {
	t.Helper()
	if len(got) != tenants {
		t.Errorf("the backend got requests of %d tenants, want %d", len(got), tenants)
	}
	for i := range tenants {
		tenant := loadgen.Tenant(i)
		s := got[tenant]
		seen := make(map[int]int, len(s))
		var dups, outOfOrder []int
		for j, step := range s {
			seen[step]++
			if seen[step] == 2 {
				dups = append(dups, step)
			}
			if j > 0 && step <= s[j-1] {
				outOfOrder = append(outOfOrder, step)
			}
		}
		var missing []int
		for step := range steps {
			if seen[step] == 0 {
				missing = append(missing, step)
			}
		}
		if len(s) != steps || len(dups) > 0 || len(missing) > 0 || len(outOfOrder) > 0 {
			t.Errorf("%s: %d requests applied, want %d; applied twice: %v; missing: %v; not after their predecessor: %v",
				tenant, len(s), steps, head(dups), head(missing), head(outOfOrder))
		}
	}
}

// head shortens a list for an error message.
func head(s []int) []int {
	if len(s) > 20 {
		return s[:20]
	}
	return s
}

// TestPipelineTenThousandRecords is the acceptance test of the pipeline:
// 10,000 records of 20 tenants on 4 partitions, read by consumer-0..3 and
// pushed to one pusher. Every record must be applied exactly once, each
// tenant's in offset order, and every partition committed to its end.
func TestPipelineTenThousandRecords(t *testing.T) {
	t.Parallel()
	const partitions, consumers, tenants, perTenant = 4, 4, 20, 500
	const records = tenants * perTenant
	start := time.Now()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, partitions)
	group := "ferry-" + topic
	shape := loadgen.Shape{Series: 2, StartMs: recentStart(), StepMs: 100}

	rec := newRecorder(backend.NewDiscard(), shape)
	addr := startRecordingPusher(t, rec)
	cs := startConsumers(t, b, topic, group, addr, consumers)

	// Produce while the consumers run, so fetching, pushing and committing
	// overlap as in production.
	produced := produceSteps(t, manualClient(t, b), topic, shape, tenants, partitions, 0, perTenant)
	if produced != records {
		t.Fatalf("produced %d records, want %d", produced, records)
	}
	waitFor(t, 90*time.Second, fmt.Sprintf("%d requests applied", records), func() bool { return rec.total() >= records })
	ends := waitCommittedToEnd(t, b, group, topic, 30*time.Second)
	elapsed := time.Since(start)

	var sum int64
	for p := range int32(partitions) {
		sum += ends[p]
		if want := int64(records / partitions); ends[p] != want {
			t.Errorf("partition %d: end offset %d, want %d", p, ends[p], want)
		}
	}
	if sum != records {
		t.Errorf("end offsets sum to %d, want %d", sum, records)
	}
	// Let anything still in flight land before counting.
	time.Sleep(200 * time.Millisecond)
	checkExactlyOnceInOrder(t, rec.snapshot(), tenants, perTenant)
	if n := rec.total(); n != records {
		t.Errorf("the backend applied %d requests, want %d", n, records)
	}
	acks := ackTotals(cs)
	if acks["ok"] != records || acks["client_error"] != 0 {
		t.Errorf("consumers counted acks %v, want ok=%d and no client_error", acks, records)
	}
	for _, c := range cs {
		st := c.Consumer.Stats()
		p, _ := consumerPartition(c.id)
		if st.Committed[p] != ends[p] {
			t.Errorf("%s: Stats().Committed[%d] = %d, want the end offset %d", c.id, p, st.Committed[p], ends[p])
		}
	}
	stopAll(t, cs)
	t.Logf("%d records (%d tenants x %d steps, %d series each) on %d partitions via %d consumers in %s: "+
		"applied %d requests, each (tenant, step) exactly once and in increasing step order per tenant; "+
		"acks %v; committed == end offsets %v",
		records, tenants, perTenant, shape.Series, partitions, consumers, elapsed.Round(time.Millisecond),
		rec.total(), acks, ends)
}

// consumerPartition returns N of consumer-N.
func consumerPartition(id string) (int32, error) {
	var p int32
	_, err := fmt.Sscanf(id, "consumer-%d", &p)
	return p, err
}

// TestGracefulRestartPushesNothingTwice stops consumers gracefully and
// starts new ones on the same group, three times over: after a full drain,
// and while records are being pushed. A graceful stop pushes what was
// fetched and commits its watermark, so the next generation must start
// exactly where the last one stopped: no (tenant, step) applied twice and
// none lost.
func TestGracefulRestartPushesNothingTwice(t *testing.T) {
	t.Parallel()
	const partitions, tenants = 4, 8
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, partitions)
	group := "ferry-" + topic
	shape := loadgen.Shape{Series: 2, StartMs: recentStart(), StepMs: 100}
	cl := manualClient(t, b)

	rec := newRecorder(backend.NewDiscard(), shape)
	addr := startRecordingPusher(t, rec)

	// Generation 1: produce, drain, stop.
	gen1 := startConsumers(t, b, topic, group, addr, partitions)
	n1 := produceSteps(t, cl, topic, shape, tenants, partitions, 0, 100)
	waitFor(t, time.Minute, "generation 1 to apply its records", func() bool { return rec.total() >= n1 })
	ends1 := waitCommittedToEnd(t, b, group, topic, 30*time.Second)
	stopAll(t, gen1)
	acks1 := ackTotals(gen1)
	checkExactlyOnceInOrder(t, rec.snapshot(), tenants, 100)

	// Generation 2: resumes at the committed offsets; produce more, drain.
	gen2 := startConsumers(t, b, topic, group, addr, partitions)
	n2 := produceSteps(t, cl, topic, shape, tenants, partitions, 100, 100)
	waitFor(t, time.Minute, "generation 2 to apply its records", func() bool { return rec.total() >= n1+n2 })
	ends2 := waitCommittedToEnd(t, b, group, topic, 30*time.Second)
	checkExactlyOnceInOrder(t, rec.snapshot(), tenants, 200)

	// Generation 2 is stopped while a larger batch is being pushed;
	// generation 3 picks up after its final commit.
	n3 := produceSteps(t, cl, topic, shape, tenants, partitions, 200, 300)
	waitFor(t, time.Minute, "generation 2 to start on the third batch", func() bool { return rec.total() > n1+n2 })
	stopAll(t, gen2)
	atStop := rec.total()
	acks2 := ackTotals(gen2)
	committedAtStop := b.CommittedOffsets(t, group, topic)
	gen3 := startConsumers(t, b, topic, group, addr, partitions)
	waitFor(t, time.Minute, "generation 3 to apply the rest", func() bool { return rec.total() >= n1+n2+n3 })
	ends3 := waitCommittedToEnd(t, b, group, topic, 30*time.Second)
	time.Sleep(200 * time.Millisecond) // anything applied twice would show up by now
	stopAll(t, gen3)
	acks3 := ackTotals(gen3)

	checkExactlyOnceInOrder(t, rec.snapshot(), tenants, 500)
	if got, want := rec.total(), n1+n2+n3; got != want {
		t.Errorf("the backend applied %d requests, want %d", got, want)
	}
	if got, want := acks1["ok"]+acks2["ok"]+acks3["ok"], int64(n1+n2+n3); got != want {
		t.Errorf("OK acks over the three generations: %d, want %d", got, want)
	}
	if acks1["client_error"]+acks2["client_error"]+acks3["client_error"] != 0 {
		t.Errorf("unexpected client errors: %v %v %v", acks1, acks2, acks3)
	}
	t.Logf("generation 1: %d records, acks %v, committed == end %v, Run returned nil", n1, acks1, ends1)
	t.Logf("generation 2: +%d records drained (committed == end %v), then stopped after %d of the next %d records were applied "+
		"(committed at stop %v), acks %v, Run returned nil", n2, ends2, atStop-n1-n2, n3, committedAtStop, acks2)
	t.Logf("generation 3: acks %v, committed == end %v; the backend applied %d requests in all, "+
		"every (tenant, step) of %d tenants x 500 steps exactly once, in order", acks3, ends3, rec.total(), tenants)
}
