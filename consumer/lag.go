package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/ferrylabs/ferry/consumer/lane"
)

// defaultEndOffsetInterval is how often the end offsets are listed. The
// fetch responses carry them too, but only while records flow: an idle or
// stalled consumer would otherwise show a lag frozen at its last fetch.
const defaultEndOffsetInterval = 5 * time.Second

// lag is what the consumer knows about how far behind it is, and how long
// its peers have been unreachable: the lag metrics, the status page and
// /ready read it.
type lag struct {
	mu sync.Mutex
	// ends are the owned partitions' end offsets, the larger of the last
	// listing and the last fetch.
	ends map[int32]int64
	// kafkaUp and pusherUp are when Kafka last answered a listing and when
	// the stream to the pusher was last seen open; zero until they were.
	kafkaUp, pusherUp time.Time
	kafkaErr          error

	// caughtUp is set once the start-up gate passed; it stays set.
	caughtUp atomic.Bool
}

// reporter tells how the consumer is doing: the lag per partition (the
// lag metrics, the status page), readiness (/ready) and the status page.
// It owns what it learns by itself — the end offsets it lists and when
// Kafka and the pusher last answered (lag) — and reads the rest of the
// consumer through the functions it is given, so it changes nothing of it.
type reporter struct {
	cfg    Config
	owned  []int32
	admin  *kadm.Client
	logger *slog.Logger
	// interval is how often the end offsets are listed
	// (defaultEndOffsetInterval; shorter in tests).
	interval time.Duration
	lag      lag

	// tracker is the tracker, nil before the start offsets are known.
	tracker func() *tracker
	// watermarks, committed and highWatermarks are per partition the
	// tracker's watermark, the committer's last commit and the last
	// fetch's end offset.
	watermarks, committed, highWatermarks func() map[int32]int64
	// streamUp reports whether the stream to the pusher is open, openErr
	// why it last failed to open (nil: no failure yet).
	streamUp func() bool
	openErr  func() *error
	// startErr is the last error loading the start offsets, nil if none.
	startErr func() *error
	// usage and retrying are the lanes' memory and retrying tenants.
	usage    func() (records, bytes int)
	retrying func() []lane.Retrying
	stats    func() Stats
	// dlqReady is the dead-letter writer's readiness, nil without
	// -dlq.topic.
	dlqReady func(now time.Time, unreachable time.Duration) error
}

// setEnd records an end offset of p, keeping the largest seen: a listing
// and a fetch may answer in either order.
func (l *lag) setEnd(p int32, end int64) {
	l.mu.Lock()
	if l.ends == nil {
		l.ends = map[int32]int64{}
	}
	if cur, ok := l.ends[p]; !ok || end > cur {
		l.ends[p] = end
	}
	l.mu.Unlock()
}

// endOffsets returns a copy of the known end offsets.
func (l *lag) endOffsets() map[int32]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int32]int64, len(l.ends))
	for p, e := range l.ends {
		out[p] = e
	}
	return out
}

// refreshEnds lists the end offsets every interval until ctx is done, so
// the lag moves even when nothing is fetched, and notes whether Kafka and
// the pusher are reachable.
// It checks the start-up gate every second (or every interval, if
// shorter), so that /ready turns true soon after the consumer caught up.
func (r *reporter) refreshEnds(ctx context.Context) {
	t := time.NewTicker(min(r.interval, time.Second))
	defer t.Stop()
	var listed time.Time
	for {
		if now := time.Now(); now.Sub(listed) >= r.interval {
			r.listEnds(ctx)
			listed = now
		}
		r.notePusher(time.Now())
		r.gateCaughtUp(time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// listEnds lists the end offsets of the owned partitions once.
func (r *reporter) listEnds(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, r.interval)
	defer cancel()
	ends, err := r.admin.ListEndOffsets(lctx, r.cfg.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		if ctx.Err() == nil {
			r.lag.mu.Lock()
			r.lag.kafkaErr = err
			r.lag.mu.Unlock()
			r.logger.Debug("listing end offsets failed", "err", err)
		}
		return
	}
	for _, p := range r.owned {
		if o, ok := ends.Lookup(r.cfg.Topic, p); ok {
			r.lag.setEnd(p, o.Offset)
		}
	}
	r.lag.noteKafka(time.Now())
}

// reset forgets the end offsets: they were a deleted topic's.
func (l *lag) reset() {
	l.mu.Lock()
	l.ends = nil
	l.mu.Unlock()
}

// noteKafka records that Kafka answered at now.
func (l *lag) noteKafka(now time.Time) {
	l.mu.Lock()
	l.kafkaUp, l.kafkaErr = now, nil
	l.mu.Unlock()
}

// notePusher records that the stream was open at now, when it is.
func (r *reporter) notePusher(now time.Time) {
	if r.streamUp() {
		r.lag.mu.Lock()
		r.lag.pusherUp = now
		r.lag.mu.Unlock()
	}
}

// PartitionLag is one owned partition's progress.
type PartitionLag struct {
	Partition int32
	// Committed is the last committed offset, the next to read.
	Committed int64
	// End is the partition's end offset, as last listed or fetched.
	End int64
	// Records is End − Committed: what Kafka's tools show as lag.
	Records int64
	// OldestUnacked is the age of the oldest record fetched and not yet
	// acknowledged, 0 when there is none: the lag in time.
	OldestUnacked time.Duration
	// Pending is the records fetched and not yet acknowledged.
	Pending int
}

// lags returns each owned partition's progress at now, in partition
// order; nil before the start offsets are known.
func (r *reporter) lags(now time.Time) []PartitionLag {
	tr := r.tracker()
	if tr == nil {
		return nil
	}
	committed := r.committed()
	ends := r.lag.endOffsets()
	for p, hw := range r.highWatermarks() {
		ends[p] = max(ends[p], hw)
	}
	oldest := tr.oldest()
	out := make([]PartitionLag, 0, len(r.owned))
	for _, p := range r.owned {
		pl := PartitionLag{Partition: p, Committed: committed[p], End: ends[p], Pending: tr.pendingIn(p)}
		pl.Records = max(0, pl.End-pl.Committed)
		if ts := oldest[p]; !ts.IsZero() {
			pl.OldestUnacked = max(0, now.Sub(ts))
		}
		out = append(out, pl)
	}
	slices.SortFunc(out, func(a, b PartitionLag) int { return int(a.Partition - b.Partition) })
	return out
}

// caughtUp reports whether partition progress pl is within maxLag at
// start-up: its oldest record not yet acknowledged is younger than maxLag,
// or none is waiting and everything up to the end offset was acknowledged.
// The watermark, not the commit, counts: a commit follows within a second.
func caughtUp(pl PartitionLag, watermark int64, maxLag time.Duration) bool {
	if pl.Pending > 0 {
		return pl.OldestUnacked <= maxLag
	}
	return watermark >= pl.End
}

// gateCaughtUp passes the start-up gate once every partition caught up.
// It is checked by the end-offset loop and by every /ready.
func (r *reporter) gateCaughtUp(now time.Time) {
	if r.lag.caughtUp.Load() || r.tracker() == nil || !r.streamUp() {
		return
	}
	if r.cfg.MaxLagAtStartup > 0 {
		ends := r.lag.endOffsets()
		for _, p := range r.owned {
			if _, ok := ends[p]; !ok {
				return // without its end offset, caught up means nothing yet
			}
		}
		wm := r.watermarks()
		for _, pl := range r.lags(now) {
			if !caughtUp(pl, wm[pl.Partition], r.cfg.MaxLagAtStartup) {
				return
			}
		}
	}
	if !r.lag.caughtUp.Swap(true) {
		r.logger.Info("caught up: ready", "max_lag_at_startup", r.cfg.MaxLagAtStartup)
	}
}

// ErrNotCaughtUp is wrapped by Ready while the consumer has not yet caught
// up at start-up (-kafka.max-consumer-lag-at-startup).
var ErrNotCaughtUp = errors.New("not caught up with the partitions yet")

// ready reports nil when the consumer does its work: its Kafka, pusher and
// lag conditions (lagReady) hold, and no dead-letter write is failing
// because the topic cannot take writes or has been failing for longer
// than -consumer.unreachable-timeout (a partition waits on it meanwhile).
func (r *reporter) ready() error {
	if err := r.lagReady(); err != nil {
		return err
	}
	if r.dlqReady != nil {
		return r.dlqReady(time.Now(), r.cfg.UnreachableTimeout)
	}
	return nil
}

// lagReady reports nil when the consumer can work. Until it has caught
// up once at start-up it needs its start offsets, a stream to the pusher
// and partitions within -kafka.max-consumer-lag-at-startup. After that a
// lag does not make it unready (a rolling restart must not wait for a
// backlog), but the pusher or Kafka unreachable for longer than
// -consumer.unreachable-timeout does.
func (r *reporter) lagReady() error {
	now := time.Now()
	r.notePusher(now)
	if !r.lag.caughtUp.Load() {
		if err := r.startupReady(); err != nil {
			return err
		}
		r.gateCaughtUp(now)
		if !r.lag.caughtUp.Load() {
			return r.notCaughtUp(now)
		}
		return nil
	}
	r.lag.mu.Lock()
	kafkaUp, kafkaErr, pusherUp := r.lag.kafkaUp, r.lag.kafkaErr, r.lag.pusherUp
	r.lag.mu.Unlock()
	limit := r.cfg.UnreachableTimeout
	if d := now.Sub(pusherUp); d > limit {
		return fmt.Errorf("pusher unreachable for %s: %w", d.Round(time.Second), r.streamErr())
	}
	if d := now.Sub(kafkaUp); d > limit {
		if kafkaErr == nil {
			kafkaErr = errors.New("no answer to listing the end offsets")
		}
		return fmt.Errorf("kafka unreachable for %s: %w", d.Round(time.Second), kafkaErr)
	}
	return nil
}

// startupReady reports why the consumer cannot work yet, if it cannot.
func (r *reporter) startupReady() error {
	if r.tracker() == nil {
		if err := r.startErr(); err != nil {
			return fmt.Errorf("start offsets not loaded from Kafka yet: %w", *err)
		}
		return errors.New("start offsets not loaded from Kafka yet")
	}
	if !r.streamUp() {
		return fmt.Errorf("no stream to the pusher: %w", r.streamErr())
	}
	return nil
}

// streamErr is why the last stream failed to open.
func (r *reporter) streamErr() error {
	if err := r.openErr(); err != nil {
		return *err
	}
	return errors.New("no stream open")
}

// notCaughtUp describes the partitions still behind.
func (r *reporter) notCaughtUp(now time.Time) error {
	wm := r.watermarks()
	for _, pl := range r.lags(now) {
		if !caughtUp(pl, wm[pl.Partition], r.cfg.MaxLagAtStartup) {
			return fmt.Errorf("%w: partition %d is %d records and %s behind (-kafka.max-consumer-lag-at-startup=%s)",
				ErrNotCaughtUp, pl.Partition, pl.Records, pl.OldestUnacked.Round(time.Millisecond), r.cfg.MaxLagAtStartup)
		}
	}
	return fmt.Errorf("%w: end offsets not listed yet", ErrNotCaughtUp)
}

var (
	endOffsetDesc = prometheus.NewDesc("ferry_consumer_end_offset",
		"The partition's end offset (the next offset to be produced), listed at least every 5 s and updated by every fetch.", []string{"partition"}, nil)
	lagRecordsDesc = prometheus.NewDesc("ferry_consumer_lag_records",
		"Records not yet committed: end offset minus committed offset, by partition.", []string{"partition"}, nil)
	oldestUnackedDesc = prometheus.NewDesc("ferry_consumer_oldest_unacked_record_age_seconds",
		"Now minus the timestamp of the oldest record fetched but not yet acknowledged, by partition; 0 when every fetched record is acknowledged.", []string{"partition"}, nil)
	retryingDesc = prometheus.NewDesc("ferry_consumer_retrying_tenants",
		"Tenants whose requests are being retried now (server errors or a broken stream), all partitions of the consumer together.", nil, nil)
	oldestRetryingDesc = prometheus.NewDesc("ferry_consumer_oldest_retrying_tenant_seconds",
		"How long the tenant retried the longest has gone without an acknowledged request; 0 when none is retrying.", nil, nil)
)

// lagCollector computes the lag metrics at scrape time from the tracker,
// the committer and the lanes.
type lagCollector struct{ r *reporter }

func (lc lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- endOffsetDesc
	ch <- lagRecordsDesc
	ch <- oldestUnackedDesc
	ch <- retryingDesc
	ch <- oldestRetryingDesc
}

func (lc lagCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for _, pl := range lc.r.lags(now) {
		p := strconv.Itoa(int(pl.Partition))
		ch <- prometheus.MustNewConstMetric(endOffsetDesc, prometheus.GaugeValue, float64(pl.End), p)
		ch <- prometheus.MustNewConstMetric(lagRecordsDesc, prometheus.GaugeValue, float64(pl.Records), p)
		ch <- prometheus.MustNewConstMetric(oldestUnackedDesc, prometheus.GaugeValue, pl.OldestUnacked.Seconds(), p)
	}
	retrying := lc.r.retrying()
	var oldest float64
	if len(retrying) > 0 {
		oldest = now.Sub(retrying[0].Since).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(retryingDesc, prometheus.GaugeValue, float64(len(retrying)))
	ch <- prometheus.MustNewConstMetric(oldestRetryingDesc, prometheus.GaugeValue, oldest)
}
