package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/ferrylabs/ferry/internal/backoff"
	"github.com/ferrylabs/ferry/internal/logging"
)

// ErrPartitionNotFound is returned when an owned partition does not exist
// in the topic: a configuration error that retrying cannot fix.
var ErrPartitionNotFound = errors.New("partition not found")

// reader fetches the owned partitions and hands their records, in offset
// order per partition, to dispatch. It owns the fetch client's cursor: the
// start offsets, the pause of a failing partition, what Kafka lost before
// it was read (inOrder, below) and a topic deleted and re-created
// (recreate.go). It is given what it needs, not the consumer.
type reader struct {
	cfg     Config
	owned   []int32
	kafka   *kgo.Client
	admin   *kadm.Client
	backoff backoff.Policy
	metrics *metrics
	stats   *stats
	logger  *slog.Logger
	// dispatch takes one fetched record; an error (ctx done) stops the
	// partition's records of this fetch.
	dispatch func(context.Context, *kgo.Record) error

	// kafkaErr is the last error loading the start offsets, so /ready
	// names the cause (a wrong password, an untrusted CA) while it lasts.
	kafkaErr atomic.Pointer[error]
	// fetchLogs bounds the fetch error lines to one a second.
	fetchLogs *logging.Limiter
	failures  failureCounts
	// next is the offset each partition's next record should have, to
	// tell what Kafka removed before it was read (inOrder). Only the
	// fetch loop reads and writes it.
	next map[int32]int64
	// topicID is the ID of the topic the start offsets belong to, to
	// tell it from a topic re-created under the same name (recreate.go).
	// The committer writes it beside every offset it commits.
	topicID atomic.Pointer[kadm.TopicID]
}

// loadStartOffsets finds where each owned partition starts: the committed
// offset of the consumer group, or -kafka.consume-from-position when
// nothing was committed. It retries until Kafka answers or ctx is done.
func (r *reader) loadStartOffsets(ctx context.Context) (map[int32]int64, error) {
	for attempt := 0; ; attempt++ {
		start, err := r.startOffsets(ctx)
		if err == nil {
			r.logger.Info("start offsets loaded", "group", r.cfg.ConsumerGroup, "offsets", start)
			return start, nil
		}
		if errors.Is(err, ErrPartitionNotFound) || ctx.Err() != nil {
			return nil, err
		}
		delay := r.backoff.Delay(attempt, 0)
		// Logged before Ready can report it (see sender.run).
		r.logger.Warn("kafka unreachable or topic missing: retrying", "err", err, "retry_in", delay.Round(time.Millisecond))
		r.kafkaErr.Store(&err)
		sleep(ctx, delay)
	}
}

// startOffsets reads the committed offsets and the partitions' bounds
// once. A committed offset below the log start offset is moved up to it,
// and the records between are counted lost (deletedBeforeStart).
func (r *reader) startOffsets(ctx context.Context) (map[int32]int64, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	id, err := r.currentTopicID(rctx)
	if err != nil {
		return nil, err
	}
	ends, err := r.admin.ListEndOffsets(rctx, r.cfg.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %q: %w", r.cfg.Topic, err)
	}
	starts, err := r.admin.ListStartOffsets(rctx, r.cfg.Topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %q: %w", r.cfg.Topic, err)
	}
	committed, err := r.admin.FetchOffsets(rctx, r.cfg.ConsumerGroup)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, fmt.Errorf("fetch committed offsets of group %q: %w", r.cfg.ConsumerGroup, err)
	}
	fallback, err := r.fallbackOffsets(rctx)
	if err != nil {
		return nil, err
	}
	start := make(map[int32]int64, len(r.owned))
	for _, p := range r.owned {
		end, ok := ends.Lookup(r.cfg.Topic, p)
		if !ok {
			return nil, fmt.Errorf("%w: topic %q has no partition %d", ErrPartitionNotFound, r.cfg.Topic, p)
		}
		first, _ := starts.Lookup(r.cfg.Topic, p)
		switch o, ok := committed.Lookup(r.cfg.Topic, p); {
		case ok && o.Err == nil && o.At >= 0 && r.staleCommit(p, o.Offset, id):
			start[p] = first.Offset // as a re-created topic is followed
		case ok && o.Err == nil && o.At >= 0:
			start[p] = o.At
			if first.Offset > o.At {
				r.deletedBeforeStart(p, o.At, first.Offset)
				start[p] = first.Offset
			}
		case fallback[p] != nil:
			start[p] = *fallback[p]
		default:
			start[p] = end.Offset
		}
	}
	r.topicID.Store(&id)
	return start, nil
}

// fallbackOffsets resolves -kafka.consume-from-position for partitions that
// have nothing committed.
func (r *reader) fallbackOffsets(ctx context.Context) (map[int32]*int64, error) {
	var (
		listed kadm.ListedOffsets
		err    error
	)
	switch r.cfg.ConsumeFromPosition {
	case PositionLastOffset, PositionStart:
		listed, err = r.admin.ListStartOffsets(ctx, r.cfg.Topic)
	case PositionTimestamp:
		listed, err = r.admin.ListOffsetsAfterMilli(ctx, r.cfg.ConsumeFromTimestamp, r.cfg.Topic)
	default: // PositionEnd: the end offsets are the default
		return nil, nil
	}
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list %s offsets of %q: %w", r.cfg.ConsumeFromPosition, r.cfg.Topic, err)
	}
	out := map[int32]*int64{}
	listed.Each(func(o kadm.ListedOffset) { out[o.Partition] = &o.Offset })
	return out, nil
}

// maxPollRecords bounds the records taken from the client at once. The
// client fetches again as soon as its buffered fetch is taken whole, so a
// poll as large as the window would hold a fetch being dispatched and the
// next one beside it: at a window of 4,096 records of 9 KB that was 45 MiB
// more of peak RSS replaying a backlog. Polling part of a fetch keeps the
// next fetch from starting until the window has taken most of this one.
const maxPollRecords = 512

// fetch fetches and dispatches records from start until ctx is done, or
// until the topic turns out deleted and re-created: then it stops
// consuming it and returns errTopicRecreated (see recreate.go).
func (r *reader) fetch(ctx context.Context, start map[int32]int64) error {
	offsets := make(map[int32]kgo.Offset, len(start))
	r.next = make(map[int32]int64, len(start))
	for p, o := range start {
		offsets[p] = kgo.NewOffset().At(o)
		r.next[p] = o
	}
	r.kafka.AddConsumePartitions(map[string]map[int32]kgo.Offset{r.cfg.Topic: offsets})
	for {
		fetches := r.kafka.PollRecords(ctx, min(r.cfg.MaxInflightRequests, maxPollRecords))
		if ctx.Err() != nil || fetches.IsClientClosed() {
			return nil
		}
		var recreated bool
		// Walk partition by partition: an error on one partition must not
		// drop the records another partition returned in the same fetch.
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if fp.Err != nil {
				recreated = recreated || r.fetchError(ctx, fp)
				return
			}
			r.failures.ok(fp.Partition)
			r.metrics.highWatermark.WithLabelValues(strconv.Itoa(int(fp.Partition))).Set(float64(fp.HighWatermark))
			r.stats.setHighWatermark(fp.Partition, fp.HighWatermark)
			for _, rec := range fp.Records {
				if !r.inOrder(fp.FetchPartition, rec) {
					continue
				}
				if err := r.dispatch(ctx, rec); err != nil {
					return
				}
			}
		})
		if recreated {
			r.kafka.PurgeTopicsFromConsuming(r.cfg.Topic)
			return errTopicRecreated
		}
	}
}

// What Kafka removed before the consumer read it.
//
// Kafka deletes records on its own: retention (retention.ms,
// retention.bytes) drops old segments whether or not a consumer read them,
// and DeleteRecords moves the log start offset by hand. The fetch client
// then answers OFFSET_OUT_OF_RANGE and resets to the log start without
// telling its user, so records are skipped that nothing acknowledged. Ferry
// promises no loss: each such record is counted in
// ferry_consumer_records_lost_total (alerted on by FerryConsumerRecordsLost)
// and each gap logged at error level with its partition and offsets.
//
// A partition's records come in offset order, and the reader knows the
// offset the next one should have (reader.next). A record past it leaves a
// gap, and the fetch that brought it says where the log starts now
// (LogStartOffset). The part of the gap below the log start was deleted
// before it was read (cause "deleted"). The part at or above it is offsets
// still in the log that held no record when fetched. Legitimate gaps are
// told apart there: a transaction's commit or abort marker takes an offset
// too, but the client hands markers over (KeepControlRecords) and they move
// next without leaving a gap; an aborted transaction's records are
// delivered like any other (the isolation level is read-uncommitted). What
// remains was removed by log compaction (cause "compacted"): on Ferry's
// topic that is loss too, since a record's key is its tenant and
// compaction keeps one request per tenant.
//
// Not counted: a log truncated under the consumer (an unclean leader
// election), which franz-go reports as ErrDataLoss without a count of
// records (logged at error level by fetchError); and a deletion that
// leaves a partition empty, counted only once a record follows it or at
// the next start.
//
// A committed offset below the log start found at start-up (the consumer
// was stopped while retention ran) is the same loss, counted before the
// first fetch (deletedBeforeStart). A topic deleted and re-created loses
// what was produced to the old topic and not yet read (recreate.go).

// Causes of ferry_consumer_records_lost_total.
const (
	lostDeleted      = "deleted"
	lostCompacted    = "compacted"
	lostTopicDeleted = "topic_deleted"
)

// inOrder notes rec, fetched in fp, as the partition's latest record,
// counting the offsets between it and the one expected as lost, and reports
// whether rec is a record to dispatch (a transaction marker is not).
func (r *reader) inOrder(fp kgo.FetchPartition, rec *kgo.Record) bool {
	next, ok := r.next[rec.Partition]
	if !ok || rec.Offset < next {
		// Not owned (dispatch refuses it), or read again after a reset
		// the client made (the tracker refuses it): not a gap.
		return !rec.Attrs.IsControl()
	}
	if rec.Offset > next {
		deletedTo := min(rec.Offset, max(next, fp.LogStartOffset))
		if deletedTo > next {
			r.lost(rec.Partition, lostDeleted, next, deletedTo, fp.LogStartOffset)
		}
		if rec.Offset > deletedTo {
			r.lost(rec.Partition, lostCompacted, deletedTo, rec.Offset, fp.LogStartOffset)
		}
	}
	r.next[rec.Partition] = rec.Offset + 1
	return !rec.Attrs.IsControl()
}

// deletedBeforeStart counts the records of partition p from the committed
// offset to the log start offset: deleted while the consumer was stopped.
func (r *reader) deletedBeforeStart(p int32, committed, logStart int64) {
	r.lost(p, lostDeleted, committed, logStart, logStart)
}

// lost counts and logs the offsets [from, to) of partition p as lost.
func (r *reader) lost(p int32, cause string, from, to, logStart int64) {
	r.metrics.lost.WithLabelValues(strconv.Itoa(int(p)), cause).Add(float64(to - from))
	r.logger.Error("records lost: Kafka removed them before this consumer read them",
		"partition", p, "cause", cause, "from_offset", from, "to_offset", to-1, "records", to-from, "log_start_offset", logStart)
}

// fetchError pauses a partition whose fetch failed and resumes it after a
// backoff. The client hands back errors it does not retry itself right
// away, so without the pause a failing partition would be fetched in a hot
// loop; pausing only that partition keeps the others flowing. It reports
// whether the error is the topic's re-creation (recreate.go) instead.
func (r *reader) fetchError(ctx context.Context, fp kgo.FetchTopicPartition) bool {
	if errors.Is(fp.Err, context.Canceled) {
		return false
	}
	if errors.Is(fp.Err, kerr.UnknownTopicID) && r.recreated(ctx) {
		return true
	}
	r.metrics.fetchErrors.WithLabelValues(strconv.Itoa(int(fp.Partition))).Inc()
	if _, ok := errors.AsType[*kgo.ErrDataLoss](fp.Err); ok {
		// Not rate-limited: rare, and the only word of a loss (inOrder).
		r.logger.Error("kafka lost records of this partition: its log was truncated", "partition", fp.Partition, "err", fp.Err)
	}
	attempt := r.failures.fail(fp.Partition)
	delay := r.backoff.Delay(attempt, 0)
	if r.fetchLogs.Allowed("") {
		r.logger.Warn("fetch error: retrying this partition, the others keep flowing",
			"partition", fp.Partition, "attempt", attempt+1, "retry_in", delay.Round(time.Millisecond), "err", fp.Err)
	}
	paused := map[string][]int32{fp.Topic: {fp.Partition}}
	r.kafka.PauseFetchPartitions(paused)
	time.AfterFunc(delay, func() { r.kafka.ResumeFetchPartitions(paused) })
	return false
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
