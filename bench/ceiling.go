package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/consumer"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// consumeCeiling reads the whole backlog in-process with franz-go, as fast
// as it can, touching every value (decode=false) or also unmarshalling it
// into a prompb.WriteRequest on GOMAXPROCS goroutines (decode=true, as the
// consumer's default -consumer.decode-workers does). It re-reads the
// backlog until -ceiling-min-time has passed and reports the aggregate.
func (e *env) consumeCeiling(ctx context.Context, bl *backlog, decode bool) stageResult {
	name := "consume"
	if decode {
		name = "consume+decode"
	}
	res := stageResult{Stage: name}
	cpu0, brokerCPU0 := selfCPU(), e.brokerCPU()
	start := time.Now()
	for res.Passes == 0 || time.Since(start) < e.cfg.CeilingMinTime {
		n, b, err := e.consumeOnce(ctx, bl, decode)
		if err != nil {
			res.Err = err.Error()
			return res
		}
		if n != bl.Records || b != bl.Bytes {
			res.Err = fmt.Sprintf("read %d records, %d bytes; the backlog has %d, %d", n, b, bl.Records, bl.Bytes)
			return res
		}
		res.Passes++
		res.Records += n
		res.Bytes += b
		res.Samples += bl.Samples
	}
	res.Elapsed = time.Since(start)
	res.HarnessCPU = selfCPU() - cpu0
	res.BrokerCPU = e.brokerCPU() - brokerCPU0
	return res
}

// sink keeps the compiler from optimising the touch of each value away.
var sink atomic.Int64

func (e *env) consumeOnce(ctx context.Context, bl *backlog, decode bool) (records, bytes int64, err error) {
	offsets := map[int32]kgo.Offset{}
	for p := range bl.Shape.Partitions {
		offsets[int32(p)] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(e.broker.addrs...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{bl.Topic: offsets}),
		// The consumer's defaults, so the ceiling fetches the same way.
		kgo.FetchMaxBytes(consumerFetchMaxBytes()), kgo.FetchMaxPartitionBytes(consumerFetchMaxBytes()),
	)
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, e.cfg.StageTimeout)
	defer cancel()

	var (
		work    chan []*kgo.Record
		wg      sync.WaitGroup
		decErrs atomic.Int64
	)
	if decode {
		work = make(chan []*kgo.Record, 4*runtime.GOMAXPROCS(0))
		for range runtime.GOMAXPROCS(0) {
			wg.Go(func() {
				var touched int64
				for recs := range work {
					for _, r := range recs {
						wr := &prompb.WriteRequest{}
						if err := wr.Unmarshal(r.Value); err != nil {
							decErrs.Add(1)
							continue
						}
						touched += int64(len(wr.Timeseries))
					}
				}
				sink.Add(touched)
			})
		}
	}
	var touched int64
	for records < bl.Records {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			break
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			err = ferr
			break
		}
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			for _, r := range fp.Records {
				records++
				bytes += int64(len(r.Value))
				if len(r.Value) > 0 {
					touched += int64(r.Value[len(r.Value)/2])
				}
			}
			if decode && len(fp.Records) > 0 {
				// Chunks, so that both workers get a share of a big fetch.
				for i := 0; i < len(fp.Records); i += 64 {
					work <- fp.Records[i:min(i+64, len(fp.Records))]
				}
			}
		})
	}
	if decode {
		close(work)
		wg.Wait()
		if n := decErrs.Load(); n > 0 && err == nil {
			err = fmt.Errorf("%d values did not decode", n)
		}
	}
	sink.Add(touched)
	if err == nil && ctx.Err() != nil {
		err = fmt.Errorf("backlog not read within -stage-timeout: %w", ctx.Err())
	}
	return records, bytes, err
}

// consumerFetchMaxBytes is ferry-consumer's default -kafka.fetch-max-bytes,
// read from its flags so that the two cannot drift apart.
func consumerFetchMaxBytes() int32 {
	var cfg consumer.Config
	cfg.RegisterFlags(flag.NewFlagSet("consumer", flag.PanicOnError))
	return int32(min(cfg.FetchMaxBytes, 1<<30)) //nolint:gosec // bounded above
}
