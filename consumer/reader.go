package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"
)

// ErrPartitionNotFound is returned when an owned partition does not exist
// in the topic: a configuration error that retrying cannot fix.
var ErrPartitionNotFound = errors.New("partition not found")

// loadStartOffsets finds where each owned partition starts: the committed
// offset of the consumer group, or -kafka.consume-from-position when
// nothing was committed. It retries until Kafka answers or ctx is done.
func (c *Consumer) loadStartOffsets(ctx context.Context) (map[int32]int64, error) {
	for attempt := 0; ; attempt++ {
		start, err := c.startOffsets(ctx)
		if err == nil {
			c.logger.Info("start offsets loaded", "group", c.cfg.ConsumerGroup, "offsets", start)
			return start, nil
		}
		if errors.Is(err, ErrPartitionNotFound) || ctx.Err() != nil {
			return nil, err
		}
		delay := c.backoff.Delay(attempt, 0)
		// Logged before Ready can report it (see sender.run).
		c.logger.Warn("kafka unreachable or topic missing: retrying", "err", err, "retry_in", delay.Round(time.Millisecond))
		c.kafkaErr.Store(&err)
		sleep(ctx, delay)
	}
}

func (c *Consumer) startOffsets(ctx context.Context) (map[int32]int64, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ends, err := c.admin.ListEndOffsets(rctx, c.cfg.Topic)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %q: %w", c.cfg.Topic, err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("list end offsets of %q: %w", c.cfg.Topic, err)
	}
	committed, err := c.admin.FetchOffsets(rctx, c.cfg.ConsumerGroup)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, fmt.Errorf("fetch committed offsets of group %q: %w", c.cfg.ConsumerGroup, err)
	}
	fallback, err := c.fallbackOffsets(rctx)
	if err != nil {
		return nil, err
	}
	start := make(map[int32]int64, len(c.owned))
	for _, p := range c.owned {
		end, ok := ends.Lookup(c.cfg.Topic, p)
		if !ok {
			return nil, fmt.Errorf("%w: topic %q has no partition %d", ErrPartitionNotFound, c.cfg.Topic, p)
		}
		if o, ok := committed.Lookup(c.cfg.Topic, p); ok && o.Err == nil && o.At >= 0 {
			start[p] = o.At
			continue
		}
		if o, ok := fallback[p]; ok {
			start[p] = o
		} else {
			start[p] = end.Offset
		}
	}
	return start, nil
}

// fallbackOffsets resolves -kafka.consume-from-position for partitions that
// have nothing committed.
func (c *Consumer) fallbackOffsets(ctx context.Context) (map[int32]int64, error) {
	var (
		listed kadm.ListedOffsets
		err    error
	)
	switch c.cfg.ConsumeFromPosition {
	case PositionLastOffset, PositionStart:
		listed, err = c.admin.ListStartOffsets(ctx, c.cfg.Topic)
	case PositionTimestamp:
		listed, err = c.admin.ListOffsetsAfterMilli(ctx, c.cfg.ConsumeFromTimestamp, c.cfg.Topic)
	default: // PositionEnd: the end offsets are the default
		return nil, nil
	}
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list %s offsets of %q: %w", c.cfg.ConsumeFromPosition, c.cfg.Topic, err)
	}
	out := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out, nil
}

// maxPollRecords bounds the records taken from the client at once. The
// client fetches again as soon as its buffered fetch is taken whole, so a
// poll as large as the window would hold a fetch being dispatched and the
// next one beside it: at a window of 4,096 records of 9 KB that was 45 MiB
// more of peak RSS replaying a backlog. Polling part of a fetch keeps the
// next fetch from starting until the window has taken most of this one.
const maxPollRecords = 512

// fetchLoop fetches and dispatches records until ctx is done.
func (c *Consumer) fetchLoop(ctx context.Context, start map[int32]int64) {
	offsets := make(map[int32]kgo.Offset, len(start))
	for p, o := range start {
		offsets[p] = kgo.NewOffset().At(o)
	}
	c.kafka.AddConsumePartitions(map[string]map[int32]kgo.Offset{c.cfg.Topic: offsets})
	for {
		fetches := c.kafka.PollRecords(ctx, min(c.cfg.MaxInflightRequests, maxPollRecords))
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return
		}
		// Walk partition by partition: an error on one partition must not
		// drop the records another partition returned in the same fetch.
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if fp.Err != nil {
				c.fetchError(fp)
				return
			}
			c.fetchFailures.ok(fp.Partition)
			c.metrics.highWatermark.WithLabelValues(strconv.Itoa(int(fp.Partition))).Set(float64(fp.HighWatermark))
			c.stats.setHighWatermark(fp.Partition, fp.HighWatermark)
			for _, rec := range fp.Records {
				if err := c.dispatch(ctx, rec); err != nil {
					return
				}
			}
		})
	}
}

// fetchError pauses a partition whose fetch failed and resumes it after a
// backoff. The client hands back errors it does not retry itself right
// away, so without the pause a failing partition would be fetched in a hot
// loop; pausing only that partition keeps the others flowing.
func (c *Consumer) fetchError(fp kgo.FetchTopicPartition) {
	if errors.Is(fp.Err, context.Canceled) {
		return
	}
	c.metrics.fetchErrors.WithLabelValues(strconv.Itoa(int(fp.Partition))).Inc()
	attempt := c.fetchFailures.fail(fp.Partition)
	delay := c.backoff.Delay(attempt, 0)
	if c.fetchLogs.Allowed("") {
		c.logger.Warn("fetch error: retrying this partition, the others keep flowing",
			"partition", fp.Partition, "attempt", attempt+1, "retry_in", delay.Round(time.Millisecond), "err", fp.Err)
	}
	paused := map[string][]int32{fp.Topic: {fp.Partition}}
	c.kafka.PauseFetchPartitions(paused)
	time.AfterFunc(delay, func() { c.kafka.ResumeFetchPartitions(paused) })
}

// failureCounts counts consecutive fetch failures per partition, for the
// backoff of fetchError.
type failureCounts struct {
	mu sync.Mutex
	n  map[int32]int
}

// fail records a failure of p and returns how many came before it.
func (f *failureCounts) fail(p int32) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[int32]int{}
	}
	n := f.n[p]
	f.n[p] = n + 1
	return n
}

// ok forgets the failures of p after a successful fetch.
func (f *failureCounts) ok(p int32) {
	f.mu.Lock()
	delete(f.n, p)
	f.mu.Unlock()
}

// kafkaLogger is franz-go's slog adapter (plugin/kslog) at warn level at
// most: the client's info lines (every connection, every metadata refresh)
// would drown the consumer's own at -log.level=info, and at
// -log.level=debug its debug lines are several per fetch request. This is
// the level the consumer's own adapter had before kslog replaced it.
func kafkaLogger(l *slog.Logger) kgo.Logger {
	return warnAtMost{kslog.New(l.With("component", "kafka"))}
}

// warnAtMost caps the level kslog derives from the slog handler at warn.
type warnAtMost struct{ *kslog.Logger }

func (w warnAtMost) Level() kgo.LogLevel { return min(w.Logger.Level(), kgo.LogLevelWarn) }
