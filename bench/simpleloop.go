package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ferrylabs/ferry/proto/codec"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

// stageSimpleLoop is the reference row of issue 17, target 8: what a user
// gets by writing the obvious loop instead of running Ferry.
const stageSimpleLoop = "simple loop"

// simpleLoop is the hand-written consumer Ferry is compared with: one
// franz-go group member polling the topic, one unary PushOne per record in
// order, a commit after each poll. It is deliberately what a first attempt
// looks like, with two concessions to fairness: Ferry's gogo codec on the
// client, and a retry of SERVER_ERROR so that it loses nothing. observe is
// called after every acknowledged record with the count so far; the loop
// returns once want records were pushed and committed.
func simpleLoop(ctx context.Context, seeds []string, topic, group string, pusher ferryv1.PusherServiceClient,
	want int64, observe func(pushed int64),
) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
	)
	if err != nil {
		return fmt.Errorf("simple loop: kafka client: %w", err)
	}
	defer cl.Close()
	var pushed int64
	for pushed < want {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			return fmt.Errorf("simple loop: fetch %s/%d: %w", errs[0].Topic, errs[0].Partition, errs[0].Err)
		}
		for it := fetches.RecordIter(); !it.Done(); {
			r := it.Next()
			req := &ferryv1.PushRequest{Tenant: string(r.Key), Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
			if err := req.WriteRequest.Unmarshal(r.Value); err != nil {
				continue // a bad record: nothing to push
			}
			for attempt := 0; ; attempt++ {
				resp, err := pusher.PushOne(ctx, req)
				if err == nil && resp.Status != ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR {
					break
				}
				if attempt == 50 || ctx.Err() != nil {
					return errors.Join(fmt.Errorf("simple loop: PushOne of %s/%d@%d failed %d times", r.Topic, r.Partition, r.Offset, attempt+1), err)
				}
				select { // the naive loop's fixed backoff
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
			pushed++
			observe(pushed)
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			return fmt.Errorf("simple loop: commit: %w", err)
		}
	}
	return nil
}

// runSimpleLoop runs simpleLoop in the harness on the backlog into a
// ferry-pusher with the discard backend, measured like a pipeline stage:
// the loop's CPU is the harness's.
func (e *env) runSimpleLoop(ctx context.Context, bl *backlog) (res stageResult) {
	res = stageResult{Stage: stageSimpleLoop}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.StageTimeout)
	defer cancel()
	p, err := e.startPusher(ctx, "simpleloop-"+bl.Shape.Name()+"-pusher", "discard")
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer func() {
		if err := p.stop(40 * time.Second); err != nil && res.Err == "" {
			res.Err = "stopping: " + err.Error()
		}
	}()
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), codec.DialOption())
	if err != nil {
		res.Err = err.Error()
		return res
	}
	defer func() { _ = conn.Close() }()
	pu0, brokerCPU0, harnessCPU0 := p.usage(), e.brokerCPU(), selfCPU()
	var steady steadyWindow
	start := time.Now()
	group := fmt.Sprintf("bench-simpleloop-%s-%08x", bl.Shape.Name(), rand.Uint32())
	err = simpleLoop(ctx, e.broker.addrs, bl.Topic, group, ferryv1.NewPusherServiceClient(conn), bl.Records, func(n int64) {
		steady.observe(time.Since(start), float64(n), float64(bl.Records))
	})
	res.Elapsed = time.Since(start)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	res.LastAck = res.Elapsed
	res.Records, res.Bytes, res.Samples = bl.Records, bl.Bytes, bl.Samples
	res.SteadyRecords, res.Steady = steady.result()
	res.BrokerCPU, res.HarnessCPU = e.brokerCPU()-brokerCPU0, selfCPU()-harnessCPU0
	pu := p.usage()
	res.PusherCPU, res.PusherPeakRSS = pu.CPU-pu0.CPU, pu.PeakRSS
	res.Check = e.verify(ctx, bl, nil, p)
	return res
}
