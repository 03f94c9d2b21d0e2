package chaos

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestPusherSIGKILLedMidRun SIGKILLs the TSDB pusher while consumers push to
// it and restarts it on the same ports and -storage.path. The consumers see
// their stream break, reconnect with backoff and resend what was not
// acknowledged. It proves that the consumers survive (still running, no
// restart), that every produced sample is queryable after the last restart
// (what was acknowledged before a kill survived it in the WAL, and what was
// not was resent), and that every partition is committed to its end. It
// runs in both tenancies: the shared TSDB's one WAL must keep the same
// promise for every tenant at once.
func TestPusherSIGKILLedMidRun(t *testing.T) {
	for _, tenancy := range []string{"separate", "shared"} {
		t.Run(tenancy, func(t *testing.T) { testPusherSIGKILLedMidRun(t, tenancy) })
	}
}

func testPusherSIGKILLedMidRun(t *testing.T, tenancy string) {
	sc := currentScale()
	const partitions, tenants, series = 2, 8, 2
	pl := newPipeline(t, partitions, tenants, series)
	steps := sc.pusherKillRecords / tenants
	produced := int64(steps * tenants)
	produceFor := 10 * time.Second
	if sc.name == "large" {
		produceFor = 30 * time.Second
	}

	pu := startPusherProc(t, "-storage.tenancy="+tenancy)
	cs := pl.startConsumers(pu.grpcAddr)
	pr := pl.newProducer()

	// The latest ok count of the running pusher: a killed pusher's counter
	// dies with it, so what it answered after the last scrape is missed.
	var okMu sync.Mutex
	lastOK := map[int]float64{} // by pusher run: a scrape racing a kill must not count twice
	scrapeCtx, stopScrape := context.WithCancel(context.Background())
	defer stopScrape()
	go func() {
		for scrapeCtx.Err() == nil {
			run := pu.runs()
			if m, err := scrape(pu.httpAddr); err == nil {
				okMu.Lock()
				lastOK[run] = max(lastOK[run], m.value("ferry_pusher_requests_total", "status", "ok"))
				okMu.Unlock()
			}
			sleepCtx(scrapeCtx, 100*time.Millisecond)
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	prodDone := pr.produceInBackground(ctx, 0, steps, produceFor)

	// One kill at a random moment in each slot of the production period,
	// and only once the pusher is answering again, so that every kill
	// hits a pusher with requests in flight.
	slot := produceFor * 9 / 10 / time.Duration(sc.pusherKills)
	var okBeforeKills float64
	kills := 0
	for k := range sc.pusherKills {
		time.Sleep(time.Until(start.Add(slot*time.Duration(k) + randDuration(slot/5, slot))))
		waitFor(t, time.Minute, "the pusher to answer again", func() bool { return scrapeOK(pu) > 0 })
		okMu.Lock()
		okBeforeKills += lastOK[pu.runs()]
		okMu.Unlock()
		committed := pl.committed()
		pu.kill()
		kills++
		down := randDuration(200*time.Millisecond, 1500*time.Millisecond)
		t.Logf("kill %d at %s: pusher SIGKILLed (committed %s), down for %s",
			kills, time.Since(start).Round(time.Millisecond), formatOffsets(committed), down.Round(time.Millisecond))
		time.Sleep(down)
		pu.start()
		pu.waitReady(60 * time.Second)
	}
	if err := <-prodDone; err != nil {
		t.Fatal(err)
	}
	committed := pl.waitCommittedToEnd(3 * time.Minute)
	drained := time.Since(start)
	stopScrape()

	var streamErrors, reconnectLogs float64
	for _, c := range cs {
		if !c.running() {
			t.Errorf("%s exited (%v) while the pusher was down: it must wait and reconnect", c.name, c.exitState())
			continue
		}
		m := c.mustScrape()
		streamErrors += m.value("ferry_consumer_acks_total", "status", "stream_error")
		reconnectLogs += float64(len(c.logLines("pusher unreachable")))
	}
	check := pl.verifyTSDB(pu.httpAddr, steps)
	m := pu.mustScrape()
	ok := okBeforeKills + m.value("ferry_pusher_requests_total", "status", "ok")
	if clientErrors := m.value("ferry_pusher_requests_total", "status", "client_error"); clientErrors != 0 {
		t.Errorf("restarted pusher answered %.0f requests CLIENT_ERROR: resent requests must be accepted", clientErrors)
	}
	// A record is applied twice only if it was resent after its stream
	// broke before its answer arrived: the consumers' stream errors bound
	// the duplicates from above, the pusher's OK answers (minus what a
	// killed pusher answered after its last scrape) from below.
	seenDuplicates := max(0, int64(ok)-produced)
	if seenDuplicates > int64(streamErrors) {
		t.Errorf("the pusher applied at least %d records twice, but only %.0f requests were resent after a broken stream", seenDuplicates, streamErrors)
	}
	duplicates := int64(streamErrors)
	t.Logf("committed %s after %s; consumers saw %.0f stream errors and logged %.0f reconnect warnings",
		formatOffsets(committed), drained.Round(time.Millisecond), streamErrors, reconnectLogs)
	report(t, outcome{
		name: "pusher-kill/" + tenancy, produced: produced, delivered: check.records, lost: check.lost,
		duplicates: duplicates, pusherKills: kills,
		extra: fmt.Sprintf("duplicates_upper_bound=true duplicates_seen=%d seconds=%.0f", seenDuplicates, drained.Seconds()),
	})
}
