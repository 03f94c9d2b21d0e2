package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestConsumersSIGKILLedAtRandomMoments runs four consumer processes, one
// per partition, against a TSDB pusher, and SIGKILLs random consumers at
// random moments while the load is produced, restarting each right away
// with the same flags. It proves:
//   - nothing is lost: every produced sample is stored at the pusher (TSDB
//     queries per tenant: sample count, series count and value sum);
//   - every partition is committed exactly to its end offset;
//   - the pusher applied every record at least once (ok requests >=
//     produced) and never rejected a replay (no client errors);
//   - duplicates are bounded: by the records each killed consumer had
//     fetched beyond the committed offset (measured at each kill), and by
//     kills x (window + records acknowledged in two commit intervals).
func TestConsumersSIGKILLedAtRandomMoments(t *testing.T) {
	sc := currentScale()
	const partitions, tenants, series = 4, 16, 2
	pl := newPipeline(t, partitions, tenants, series)
	steps := sc.killRecords / tenants
	produced := int64(steps * tenants)

	pu := startPusherProc(t)
	cs := pl.startConsumers(pu.grpcAddr)
	pr := pl.newProducer()

	// The pusher's busiest second, for the duplicate bound.
	var peakMu sync.Mutex
	var peakPerSecond float64
	scrapeCtx, stopScrape := context.WithCancel(context.Background())
	defer stopScrape()
	go func() {
		prev := -1.0
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		for {
			select {
			case <-scrapeCtx.Done():
				return
			case <-tk.C:
			}
			m, err := scrape(pu.httpAddr)
			if err != nil {
				continue
			}
			ok := m.value("ferry_pusher_requests_total", "status", "ok")
			if prev >= 0 {
				peakMu.Lock()
				peakPerSecond = max(peakPerSecond, ok-prev)
				peakMu.Unlock()
			}
			prev = ok
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	prodDone := pr.produceInBackground(ctx, 0, steps, sc.killProduceFor)

	// Kill moments: uniformly random over the production period.
	moments := make([]time.Duration, sc.consumerKills)
	for i := range moments {
		moments[i] = randDuration(sc.killProduceFor/10, sc.killProduceFor)
	}
	slices.Sort(moments)

	startAt := make([]int64, partitions) // committed offset each consumer started from
	var replayBound int64                // records each killed consumer may have pushed past the commit
	kills := 0
	for _, at := range moments {
		time.Sleep(time.Until(start.Add(at)))
		i := rand.IntN(partitions)
		c := cs[i]
		// How far the consumer got: the offset it started at plus what it
		// fetched, scraped just before the kill. Fetching between the
		// scrape and the kill is bounded by the window.
		fetched := -1.0
		if m, err := scrape(c.httpAddr); err == nil {
			fetched = m.value("ferry_consumer_records_fetched_total")
		}
		c.kill()
		kills++
		committed := pl.committed()[int32(i)]
		end := pl.ends()[int32(i)]
		pos := end
		if fetched >= 0 {
			pos = min(end, startAt[i]+int64(fetched)+maxInflight)
		}
		gap := max(0, pos-committed)
		replayBound += gap
		t.Logf("kill %d at %s: consumer-%d SIGKILLed (fetched %.0f since its start at %d; committed %d, end %d: at most %d records to replay)",
			kills, time.Since(start).Round(time.Millisecond), i, fetched, startAt[i], committed, end, gap)
		startAt[i] = committed // the dead consumer cannot commit any more
		time.Sleep(randDuration(0, 500*time.Millisecond))
		c.start() // not waiting for readiness: the next kill may hit a starting consumer
	}
	if err := <-prodDone; err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		c.waitReady(60 * time.Second)
	}
	committed := pl.waitCommittedToEnd(3 * time.Minute)
	drained := time.Since(start)
	stopScrape()

	check := pl.verifyTSDB(pu.httpAddr, steps)
	m := pu.mustScrape()
	ok := int64(m.value("ferry_pusher_requests_total", "status", "ok"))
	clientErrors := int64(m.value("ferry_pusher_requests_total", "status", "client_error"))
	duplicates := ok - produced
	peakMu.Lock()
	peak := int64(peakPerSecond)
	peakMu.Unlock()
	designBound := int64(kills) * (maxInflight + 2*peak)

	if ok < produced {
		t.Errorf("pusher acknowledged %d requests OK, fewer than the %d records produced", ok, produced)
	}
	if clientErrors != 0 {
		t.Errorf("pusher answered %d requests CLIENT_ERROR: replays after a kill must be accepted", clientErrors)
	}
	if duplicates > replayBound {
		t.Errorf("%d duplicates, more than the %d records the killed consumers had fetched beyond their committed offsets", duplicates, replayBound)
	}
	if duplicates > designBound {
		t.Errorf("%d duplicates, more than kills x (window + 2 commit intervals of the peak rate) = %d x (%d + 2 x %d) = %d",
			duplicates, kills, maxInflight, peak, designBound)
	}
	t.Logf("committed %s after %s; ok requests %d, peak %d/s; duplicate bounds: measured %d, design %d",
		formatOffsets(committed), drained.Round(time.Millisecond), ok, peak, replayBound, designBound)
	report(t, outcome{
		name: "consumer-kill", produced: produced, delivered: check.records, lost: check.lost,
		duplicates: duplicates, consumerKills: kills,
		extra: fmt.Sprintf("dup_bound=%d seconds=%.0f", replayBound, drained.Seconds()),
	})
}
