package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/kafkatest"
)

// brokerWarnings are the consumer log messages that say Kafka is away.
var brokerWarnings = []string{
	"commit failed",
	"fetch error",
	"kafka client:",
	"component=kafka",
	"kafka unreachable",
}

// TestBrokerRestartMidRun stops the real broker while records are produced
// and consumed, keeps it down for a few seconds and starts it again on the
// same data. It proves that the consumers keep running and each says in its
// log that Kafka is away (connection warnings; failed commits when they had
// something to commit), that they resume by themselves once it is back,
// that every produced sample, before and after the outage, is stored at the
// pusher, and that every partition is committed to its end.
// It cannot run on kfake or an external broker, and must not run in
// parallel: the broker is the package's.
func TestBrokerRestartMidRun(t *testing.T) {
	b := kafkatest.Current(t)
	if b.Kind() != kafkatest.KindReal {
		t.Skipf("needs the real broker kafkatest starts itself, not %s", b.Kind())
	}
	sc := currentScale()
	const partitions, tenants, series = 2, 8, 2
	pl := newPipeline(t, partitions, tenants, series)
	steps := sc.brokerRecords / tenants
	produced := int64(steps * tenants)

	pu := startPusherProc(t)
	cs := pl.startConsumers(pu.grpcAddr)
	pr := pl.newProducer()
	produceFor := 10 * time.Second
	if sc.name == "large" {
		produceFor = 30 * time.Second
	}
	// The load is produced all along: the producer waits out the outage
	// (it retries until the broker is back) and the consumers have records
	// in flight when the broker goes away.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	prodDone := pr.produceInBackground(ctx, 0, steps, produceFor)
	waitFor(t, time.Minute, "a first commit", func() bool { return len(pl.committed()) > 0 })
	time.Sleep(time.Until(start.Add(produceFor / 3)))

	before := pl.committed()
	okAtStop := scrapeOK(pu)
	for _, c := range cs {
		c.mark("broker stop")
	}
	stopAt := time.Now()
	b.Stop(t)
	t.Logf("broker stopped in %s at %s (committed %s)", time.Since(stopAt).Round(time.Millisecond),
		stopAt.Sub(start).Round(time.Millisecond), formatOffsets(before))
	time.Sleep(sc.brokerDown)
	for _, c := range cs {
		if !c.running() {
			t.Fatalf("%s exited (%v) while the broker was down: it must wait", c.name, c.exitState())
		}
	}
	okAtStart := scrapeOK(pu)
	startAt := time.Now()
	b.Start(t)
	t.Logf("broker down for %s, restarted in %s", startAt.Sub(stopAt).Round(time.Millisecond), time.Since(startAt).Round(time.Millisecond))
	for _, c := range cs {
		c.mark("broker started")
	}
	if err := <-prodDone; err != nil {
		t.Fatal(err)
	}
	committed := pl.waitCommittedToEnd(3 * time.Minute)
	drained := time.Since(start)

	// The consumers must have said that Kafka was away.
	var warned []string
	commitWarnings := 0
	for _, c := range cs {
		if !c.running() {
			t.Errorf("%s exited (%v)", c.name, c.exitState())
		}
		outage := c.log()
		if i := strings.Index(outage, "=== chaos: broker stop"); i >= 0 {
			outage = outage[i:]
		}
		if j := strings.Index(outage, "=== chaos: broker started"); j >= 0 {
			outage = outage[:j]
		}
		n := 0
		for _, line := range strings.Split(outage, "\n") {
			for _, w := range brokerWarnings {
				if strings.Contains(line, w) && (strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR")) {
					if w == "commit failed" {
						commitWarnings++
					}
					if n == 0 {
						warned = append(warned, c.name+": "+truncate(line, 300))
					}
					n++
					break
				}
			}
		}
		if n == 0 {
			t.Errorf("%s logged no warning while the broker was down (looked for %q)", c.name, brokerWarnings)
		}
	}
	check := pl.verifyTSDB(pu.httpAddr, steps)
	m := pu.mustScrape()
	ok := int64(m.value("ferry_pusher_requests_total", "status", "ok"))
	if ok < produced {
		t.Errorf("pusher acknowledged %d requests OK, fewer than the %d produced", ok, produced)
	}
	t.Logf("%d requests pushed while the broker was down; %d failed commits logged; first warnings:\n  %s",
		okAtStart-okAtStop, commitWarnings, strings.Join(warned, "\n  "))
	t.Logf("committed %s after %s", formatOffsets(committed), drained.Round(time.Millisecond))
	report(t, outcome{
		name: "broker-restart", produced: produced, delivered: check.records, lost: check.lost,
		duplicates: ok - produced, brokerRestarts: 1,
		extra: fmt.Sprintf("broker_down=%s failed_commits_logged=%d seconds=%.0f", startAt.Sub(stopAt).Round(100*time.Millisecond), commitWarnings, drained.Seconds()),
	})
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// scrapeOK returns the pusher's OK answers so far (0 if it cannot be read).
func scrapeOK(pu *proc) int64 {
	m, err := scrape(pu.httpAddr)
	if err != nil {
		return 0
	}
	return int64(m.value("ferry_pusher_requests_total", "status", "ok"))
}
