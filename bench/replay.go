package main

import (
	"context"
	"time"
)

// replayShape is the backlog of the memory check: one partition (so one
// consumer holds it all), 100 tenants of 100-series requests.
var replayShape = Shape{Partitions: 1, Tenants: 100, Series: 100}

// measureReplay produces -replay.bytes of record values into one partition
// and replays it through one consumer with default flags and a discard
// pusher, for the consumer's peak RSS.
func (e *env) measureReplay(ctx context.Context) (res replayResult) {
	res.ConsumerFlags = "defaults (only addresses, topic, group and -instance-id=consumer-0 set)"
	e.logf("replay: producing %.0f MB of record values into one partition", float64(e.cfg.ReplayBytes)/1e6)
	bl, err := e.produceBacklog(ctx, "replay", replayShape, e.cfg.ReplayBytes)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	res.Backlog, res.ProduceDuration = bl, bl.Took
	e.logf("replay: %d records, %.0f MB produced in %s; replaying", bl.Records, float64(bl.Bytes)/1e6, bl.Took.Round(time.Second))
	res.Stage = e.runPipeline(ctx, bl, "replay", pipelineOpts{
		backend: "discard",
		during: func(ctx context.Context, cs []*consumerProc, _ *pusherProc) {
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for i := 0; ; i++ {
				for _, c := range cs {
					if u, err := readUsage(c.pid()); err == nil {
						res.MaxSampledRSS = max(res.MaxSampledRSS, u.RSS)
					}
					if i%5 == 0 {
						if m, err := scrape(ctx, c.httpAddr); err == nil {
							res.MaxHeapInuse = max(res.MaxHeapInuse, m.sum("go_memstats_heap_inuse_bytes", nil))
						}
					}
				}
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		},
	})
	res.Err = res.Stage.Err
	return res
}
