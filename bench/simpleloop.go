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
// called after every acknowledged record with the count so far, and stops
// the loop (without committing the poll it is in) by returning false; the
// loop returns once want records were pushed and committed.
func simpleLoop(ctx context.Context, seeds []string, topic, group string, pusher ferryv1.PusherServiceClient,
	want int64, observe func(pushed int64) bool,
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
			if !observe(pushed) {
				return nil
			}
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
	// The loop is about ten times slower than the pipeline: it stops after
	// -simpleloop.max-time, and its rate is then over what it pushed.
	var (
		acks   []time.Duration // when each record was acknowledged
		pushed int64
	)
	start := time.Now()
	deadline := start.Add(e.cfg.SimpleLoopMaxTime)
	group := fmt.Sprintf("bench-simpleloop-%s-%08x", bl.Shape.Name(), rand.Uint32())
	err = simpleLoop(ctx, e.broker.addrs, bl.Topic, group, ferryv1.NewPusherServiceClient(conn), bl.Records, func(n int64) bool {
		now := time.Now()
		acks, pushed = append(acks, now.Sub(start)), n
		return now.Before(deadline)
	})
	res.Elapsed = time.Since(start)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	res.LastAck = res.Elapsed
	res.BrokerCPU, res.HarnessCPU = e.brokerCPU()-brokerCPU0, selfCPU()-harnessCPU0
	pu := p.usage()
	res.PusherCPU, res.PusherPeakRSS = pu.CPU-pu0.CPU, pu.PeakRSS
	res.Records, res.Samples = pushed, pushed*int64(bl.Shape.Series)
	res.Bytes = bl.Bytes * pushed / max(bl.Records, 1)
	var steady steadyWindow
	for i, at := range acks {
		steady.observe(at, float64(i+1), float64(pushed), nil)
	}
	res.SteadyRecords, res.Steady = steady.result()
	if pushed == bl.Records {
		res.Check = e.verify(ctx, bl, nil, p)
	} else {
		part := *bl
		part.Records, part.Samples = pushed, res.Samples
		res.Check = e.verify(ctx, &part, nil, p)
		res.Info = fmt.Sprintf("stopped after %s of %s records (-simpleloop.max-time %s)", fmtNum(float64(pushed)), fmtNum(float64(bl.Records)), e.cfg.SimpleLoopMaxTime)
	}
	return res
}
