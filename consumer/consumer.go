package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/backoff"
)

// Consumer moves the records of its partitions to the pusher. Create it
// with New and call Run once.
type Consumer struct {
	cfg     Config
	owned   []int32
	logger  *slog.Logger
	metrics *metrics
	backoff backoff.Policy

	kafka  *kgo.Client
	admin  *kadm.Client
	sender *sender
	// refetch reads parked records again; see park.go.
	refetch *refetcher
	window  *window
	lanes   *lanes
	decode  chan *item

	// Set once the start offsets are known; nil before.
	tracker atomic.Pointer[tracker]
	// kafkaErr is the last error loading the start offsets, so /ready
	// names the cause (a wrong password, an untrusted CA) while it lasts.
	kafkaErr  atomic.Pointer[error]
	committer *committer

	nextID        atomic.Uint64
	nextSequence  atomic.Uint64
	clientLogs    *logLimiter
	fetchLogs     *logLimiter
	fetchFailures failureCounts
	stats         stats
}

// New builds a consumer; it does not contact Kafka or the pusher yet. Run
// does, and keeps retrying while they are unreachable.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Consumer, error) {
	owned, err := cfg.OwnedPartitions()
	if err != nil {
		return nil, err
	}
	brokers, err := cfg.Brokers()
	if err != nil {
		return nil, err
	}
	c := &Consumer{
		cfg:        cfg,
		owned:      owned,
		logger:     logger.With("topic", cfg.Topic, "partitions", owned),
		backoff:    backoff.Policy{Min: cfg.BackoffMin, Max: cfg.BackoffMax},
		window:     newWindow(cfg.MaxInflightRequests, cfg.MaxInflightBytes),
		decode:     make(chan *item, cfg.MaxInflightRequests),
		clientLogs: newLogLimiter(10, time.Second),
		fetchLogs:  newLogLimiter(1, time.Second),
	}
	c.lanes = newLanes(c.deliverLane)
	c.metrics = newMetrics(reg, c)
	kafkaOpts, err := cfg.Kafka.Opts()
	if err != nil {
		return nil, err
	}
	c.kafka, err = kgo.NewClient(append(kafkaOpts,
		kgo.SeedBrokers(brokers...),
		kgo.FetchMaxBytes(int32(min(cfg.FetchMaxBytes, 1<<30))),          //nolint:gosec // bounded above
		kgo.FetchMaxPartitionBytes(int32(min(cfg.FetchMaxBytes, 1<<30))), //nolint:gosec // bounded above
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.WithLogger(kgoLogger{c.logger}),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	c.admin = kadm.NewClient(c.kafka)
	c.sender, err = newSender(cfg.PusherAddress, cfg.PusherTLS, c.backoff, c.logger)
	if err != nil {
		c.kafka.Close()
		return nil, err
	}
	c.refetch, err = newRefetcher(cfg, c.logger)
	if err != nil {
		c.kafka.Close()
		return nil, err
	}
	c.committer = newCommitter(c)
	return c, nil
}

// Ready reports nil once the consumer knows where to start and has a stream
// to the pusher.
func (c *Consumer) Ready() error {
	if c.tracker.Load() == nil {
		if err := c.kafkaErr.Load(); err != nil {
			return fmt.Errorf("start offsets not loaded from Kafka yet: %w", *err)
		}
		return errors.New("start offsets not loaded from Kafka yet")
	}
	if !c.sender.ready.Load() {
		if err := c.sender.openErr.Load(); err != nil {
			return fmt.Errorf("no stream to the pusher: %w", *err)
		}
		return errors.New("no stream to the pusher")
	}
	return nil
}

// Run consumes until ctx is done, then stops gracefully: it stops fetching,
// pushes what was fetched for up to -shutdown-timeout, commits the final
// watermark and returns. Records that were not acknowledged by then are not
// committed and will be read again by the next run.
func (c *Consumer) Run(ctx context.Context) error {
	defer c.kafka.Close()
	defer c.refetch.close()
	// The lanes and the stream outlive ctx: they drain after it is done.
	drainCtx, cancelDrain := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelDrain()

	var bg sync.WaitGroup
	bg.Go(func() { c.sender.run(drainCtx) })
	for range c.cfg.DecodeWorkers {
		bg.Go(func() { c.decodeLoop() })
	}
	defer func() {
		close(c.decode)
		cancelDrain()
		_ = c.sender.close()
		bg.Wait()
	}()

	start, err := c.loadStartOffsets(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before Kafka answered: nothing was consumed
		}
		return err
	}
	tr := newTracker(start)
	c.committer.skipInitial(start)
	c.tracker.Store(tr)
	c.lanes.start(drainCtx)

	var commits sync.WaitGroup
	commitCtx, stopCommits := context.WithCancel(ctx)
	commits.Go(func() { c.committer.run(commitCtx) })

	c.fetchLoop(ctx, start)

	c.logger.Info("stopping: pushing what was fetched", "timeout", c.cfg.ShutdownTimeout)
	stopCommits()
	commits.Wait()
	timer := time.AfterFunc(c.cfg.ShutdownTimeout, cancelDrain)
	drained := c.lanes.wait(drainCtx)
	timer.Stop()
	if !drained {
		// The lanes were cancelled; let them record the acks that arrived
		// just before, so the final commit reflects them (they stop within
		// a moment: every wait of theirs ends with the context).
		settle, cancelSettle := context.WithTimeout(context.Background(), time.Second)
		c.lanes.wait(settle)
		cancelSettle()
		c.logger.Warn("shutdown timeout: records left unacknowledged will be read again on restart", "pending", tr.pending())
	}
	finalCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.SyncTimeout)
	defer cancel()
	if err := c.committer.commit(finalCtx); err != nil {
		return fmt.Errorf("final commit: %w", err)
	}
	c.logger.Info("consumer stopped", "committed", c.committer.lastCommitted())
	return nil
}
