package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
	"google.golang.org/grpc"

	"github.com/ferrylabs/ferry/consumer/lane"
	"github.com/ferrylabs/ferry/internal/backoff"
	"github.com/ferrylabs/ferry/internal/logging"
	"github.com/ferrylabs/ferry/internal/statuspage"
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
	reader *reader
	sender *sender
	// refetch reads parked records again for the lanes.
	refetch  *refetcher
	lanes    *lane.Lanes
	validate chan *lane.Item

	// Set once the start offsets are known; nil before.
	tracker atomic.Pointer[tracker]
	// following is set while the consumer moves to a re-created topic:
	// the old topic's watermarks must not be committed (recreate.go).
	following atomic.Bool
	committer *committer
	// toSync is the tenants the next Sync must make durable.
	toSync syncSet
	// dlq is the dead-letter producer, nil without -dlq.topic.
	dlq *deadLetters

	// clientLogs bounds the lines of skipped records and retries to 10 a
	// second, so a flood of bad records cannot flood the log; the metrics
	// still count every one.
	clientLogs *logging.Limiter
	stats      stats
	// report is the lag, readiness and status page (lag.go, status.go).
	report *reporter
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
		validate:   make(chan *lane.Item, cfg.MaxInflightRequests),
		clientLogs: logging.NewLimiterN(10, time.Second),
	}
	// The Kafka and gRPC clients' own metrics, beside the consumer's.
	kafkaMetrics := kprom.NewMetrics("ferry_consumer_kafka", kprom.Registerer(reg))
	grpcMetrics := grpcprom.NewClientMetrics(
		grpcprom.WithClientCounterOptions(grpcprom.WithNamespace("ferry_consumer")),
		grpcprom.WithClientHandlingTimeHistogram(grpcprom.WithHistogramNamespace("ferry_consumer")),
	)
	reg.MustRegister(grpcMetrics)
	kafkaOpts, err := cfg.Kafka.Opts()
	if err != nil {
		return nil, err
	}
	kafkaOpts = append(kafkaOpts, kgo.SeedBrokers(brokers...), kgo.WithLogger(kafkaLogger(c.logger)))
	c.kafka, err = newSizedClient(cfg.FetchMaxBytes, cfg.FetchMaxDecompressed, append(kafkaOpts[:len(kafkaOpts):len(kafkaOpts)],
		// A reset follows the log start when retention passed the
		// position; the records skipped are counted (reader.inOrder).
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Transaction markers take offsets: seen, they are not gaps.
		kgo.KeepControlRecords(),
		kgo.WithHooks(kafkaMetrics),
	)...)
	if err != nil {
		return nil, err
	}
	c.admin = kadm.NewClient(c.kafka)
	if cfg.DLQTopic != "" {
		c.dlq = &deadLetters{topic: cfg.DLQTopic, opts: kafkaOpts, admin: c.admin}
	}
	c.sender, err = newSender(cfg.PusherAddress, cfg.Topic, messageBounds{requests: cfg.MaxMessageRequests, bytes: cfg.MaxMessageBytes}, cfg.PusherTLS, c.backoff, c.logger,
		grpc.WithChainUnaryInterceptor(grpcMetrics.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(grpcMetrics.StreamClientInterceptor()))
	if err != nil {
		c.kafka.Close()
		return nil, err
	}
	c.refetch, err = newRefetcher(cfg, c.logger)
	if err != nil {
		c.kafka.Close()
		return nil, err
	}
	c.lanes = lane.New(lane.Config{
		InflightPerTenant: cfg.MaxInflightPerTenant,
		RetryingShare:     cfg.RetryingTenantRecords,
		WindowRecords:     cfg.MaxInflightRequests,
		WindowBytes:       cfg.MaxInflightBytes,
		Backoff:           c.backoff,
	}, c.laneWorld())
	c.metrics = newMetrics(reg, c.lanes.Usage, c.sender.ready.Load)
	c.reader = &reader{
		cfg: cfg, owned: owned, kafka: c.kafka, admin: c.admin, backoff: c.backoff,
		metrics: c.metrics, stats: &c.stats, logger: c.logger, dispatch: c.dispatch,
		fetchLogs: logging.NewLimiterN(1, time.Second),
	}
	c.report = c.newReporter()
	reg.MustRegister(lagCollector{c.report})
	c.committer = &committer{
		topic: cfg.Topic, group: cfg.ConsumerGroup,
		interval: cfg.CommitInterval, syncTimeout: cfg.SyncTimeout,
		commitOffsets: commitWith(c.admin, cfg.ConsumerGroup), watermarks: c.watermarks, sync: c.sender.sync, tenants: &c.toSync,
		metrics: c.metrics, logger: c.logger,
	}
	return c, nil
}

// newReporter gives the reporter what it reads of the consumer.
func (c *Consumer) newReporter() *reporter {
	r := &reporter{
		cfg: c.cfg, owned: c.owned, admin: c.admin, logger: c.logger, interval: defaultEndOffsetInterval,
		tracker:        c.tracker.Load,
		watermarks:     c.watermarks,
		committed:      func() map[int32]int64 { return c.committer.lastCommitted() },
		highWatermarks: c.stats.highWatermarks,
		streamUp:       c.sender.ready.Load,
		openErr:        c.sender.openErr.Load,
		startErr:       c.reader.kafkaErr.Load,
		usage:          c.lanes.Usage,
		retrying:       c.lanes.Retrying,
		stats:          c.Stats,
	}
	if c.dlq != nil {
		r.dlqReady = c.dlq.ready
	}
	return r
}

// Ready reports nil when the consumer does its work: its Kafka, pusher and
// lag conditions hold (see reporter.lagReady), and no dead-letter write is
// failing because the topic cannot take writes or has been failing for
// longer than -consumer.unreachable-timeout (a partition waits on it
// meanwhile).
func (c *Consumer) Ready() error { return c.report.ready() }

// Lags returns each owned partition's progress at now, in partition
// order; nil before the start offsets are known.
func (c *Consumer) Lags(now time.Time) []PartitionLag { return c.report.lags(now) }

// StatusPage is what the consumer's HTTP port shows at /: readiness, the
// stream, and per partition how far behind it is, and which tenants are
// being retried (the first thing to look at when the lag grows).
func (c *Consumer) StatusPage() statuspage.Page { return c.report.statusPage() }

// laneWorld connects the lanes to the stream, the refetcher, the tracker
// and the metrics.
func (c *Consumer) laneWorld() lane.World {
	return lane.World{
		Sender: c.sender,
		Rereader: lane.RereadFunc(func(ctx context.Context, p int32, offsets []int64) (map[int64][]byte, error) {
			values, _, err := c.refetch.read(ctx, p, offsets)
			return values, err
		}),
		Validate: c.validateItem,
		Skip:     c.skip,
		Finish:   c.finish,
		Ack:      c.countAck,
		Retry:    func(cause string) { c.metrics.retries.WithLabelValues(cause).Inc() },
		Parked:   func(n int) { c.metrics.parked.Add(float64(n)) },
		Reread:   func(n int) { c.metrics.reread.Add(float64(n)) },
		Sleep:    sleep,
		AllowLog: func() bool { return c.clientLogs.Allowed("") },
		Logger:   c.logger,
	}
}

// Run consumes until ctx is done, then stops gracefully: it stops fetching,
// pushes what was fetched for up to -shutdown-timeout, commits the final
// watermark and returns. Records that were not acknowledged by then are not
// committed and will be read again by the next run.
func (c *Consumer) Run(ctx context.Context) error {
	defer c.kafka.Close()
	defer c.refetch.close()
	if c.dlq != nil {
		defer c.dlq.close()
	}
	// The lanes and the stream outlive ctx: they drain after it is done.
	drainCtx, cancelDrain := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelDrain()

	var bg sync.WaitGroup
	bg.Go(func() { c.sender.run(drainCtx) })
	bg.Go(func() { c.report.refreshEnds(drainCtx) })
	for range c.cfg.DecodeWorkers {
		bg.Go(func() { c.validateLoop() })
	}
	defer func() {
		close(c.validate)
		cancelDrain()
		_ = c.sender.close()
		bg.Wait()
	}()

	start, err := c.reader.loadStartOffsets(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before Kafka answered: nothing was consumed
		}
		return err
	}
	c.report.lag.noteKafka(time.Now())
	tr := newTracker(start)
	c.committer.skipInitial(start, c.reader.commitMetadata())
	c.tracker.Store(tr)
	c.lanes.Start(drainCtx)

	var commits sync.WaitGroup
	commitCtx, stopCommits := context.WithCancel(ctx)
	commits.Go(func() { c.committer.run(commitCtx) })

	for errors.Is(c.reader.fetch(ctx, start), errTopicRecreated) {
		if start, err = c.followRecreated(ctx); err != nil {
			break // ctx is done: stop as usual, committing nothing of the old topic
		}
	}

	c.logger.Info("stopping: pushing what was fetched", "timeout", c.cfg.ShutdownTimeout)
	stopCommits()
	commits.Wait()
	timer := time.AfterFunc(c.cfg.ShutdownTimeout, cancelDrain)
	drained := c.lanes.Wait(drainCtx)
	timer.Stop()
	if !drained {
		// The lanes were cancelled; let them record the acks that arrived
		// just before, so the final commit reflects them (they stop within
		// a moment: every wait of theirs ends with the context). The bound
		// is generous because a starved machine (seen at load 20 on two
		// cores) took over a second, and each ack missed here is a record
		// pushed twice after the restart.
		settle, cancelSettle := context.WithTimeout(context.Background(), 5*time.Second)
		c.lanes.Wait(settle)
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
