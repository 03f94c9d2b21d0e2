package consumer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/internal/logging"
)

// logBuffer is a log the test reads while the consumer writes it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// logger logs at info level to b.
func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, nil))
}

// deleteRecordsBefore deletes partition 0 of topic below offset, as
// retention or an operator would.
func deleteRecordsBefore(t *testing.T, adm *kadm.Client, topic string, offset int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: topic, Partition: 0, At: offset})
	resp, err := adm.DeleteRecords(ctx, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("delete records of %s below %d: %v", topic, offset, err)
	}
}

// lost is ferry_consumer_records_lost_total of partition 0 for cause.
func (rc *runningConsumer) lost(cause string) int {
	return int(testutil.ToFloat64(rc.metrics.lost.WithLabelValues("0", cause)))
}

// TestRecordsDeletedWhileTheConsumerWasStoppedAreCountedLost: offsets 5 to
// 14 deleted while the consumer was stopped. It resumes at 15, and says so:
// ten records lost in the metric, and an error line with the partition and
// the offsets.
func TestRecordsDeletedWhileTheConsumerWasStoppedAreCountedLost(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	cl := manualClient(t, b)
	rec := newRecorder()
	addr := startPusher(t, rec.backend())
	cfg := testConfig(b.Addrs(), topic, "0", addr)

	produce(t, cl, topic, 1, 1, 0, 5)
	first := startConsumer(t, cfg)
	waitCommitted(t, b, cfg.ConsumerGroup, topic, 30*time.Second)
	first.stop(t)

	produce(t, cl, topic, 1, 1, 5, 15)
	deleteRecordsBefore(t, b.Admin(t), topic, 15)
	var log logBuffer
	c := startConsumerLogging(t, cfg, log.logger())
	waitCommitted(t, b, cfg.ConsumerGroup, topic, 30*time.Second)

	want := []int{0, 1, 2, 3, 4, 15, 16, 17, 18, 19}
	if got := rec.snapshot()[loadgen.Tenant(0)]; !slices.Equal(got, want) {
		t.Errorf("steps pushed %v, want %v", got, want)
	}
	if n := c.lost(lostDeleted); n != 10 {
		t.Errorf("%d records counted lost (deleted), want 10", n)
	}
	line := regexp.MustCompile(`level=ERROR msg="records lost[^"]*" .*partition=0 cause=deleted from_offset=5 to_offset=14 records=10`)
	if !line.MatchString(log.String()) {
		t.Errorf("no error line for the lost offsets 5 to 14; the log:\n%s", log.String())
	}
}

// TestRecordsDeletedWhileTheConsumerRunsBehindAreCountedLost: the pusher
// holds every push while the consumer has fetched the start of a backlog
// of 200 records, and the records below 150 are deleted meanwhile. Every
// offset is then either pushed or counted lost, none twice, and the loss
// is logged.
func TestRecordsDeletedWhileTheConsumerRunsBehindAreCountedLost(t *testing.T) {
	t.Parallel()
	const records, deleteBelow = 200, 150
	b := kafkatest.Current(t)
	topic, cfg, release, steps := gatedBacklog(t, b, records)
	defer release()
	var log logBuffer
	c := startConsumerLogging(t, cfg, log.logger())
	waitFor(t, 30*time.Second, "the window full", func() bool { return c.Stats().Inflight == cfg.MaxInflightRequests })

	deleteRecordsBefore(t, b.Admin(t), topic, deleteBelow)
	release()
	waitCommitted(t, b, cfg.ConsumerGroup, topic, 30*time.Second)

	got := steps()
	slices.Sort(got)
	if len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Errorf("a record pushed twice: %v", got)
	}
	for s := deleteBelow; s < records; s++ {
		if _, found := slices.BinarySearch(got, s); !found {
			t.Fatalf("step %d, not deleted, was not pushed: %v", s, got)
		}
	}
	lost := c.lost(lostDeleted)
	if lost == 0 || len(got)+lost != records {
		t.Errorf("%d records pushed and %d counted lost, want a loss and %d in all", len(got), lost, records)
	}
	pushedBelow := len(got) - (records - deleteBelow)
	line := fmt.Sprintf(`level=ERROR msg="records lost[^"]*" .*partition=0 cause=deleted from_offset=%d to_offset=%d records=%d`, pushedBelow, deleteBelow-1, lost)
	if !regexp.MustCompile(line).MatchString(log.String()) {
		t.Errorf("no error line for the lost offsets %d to %d; the log:\n%s", pushedBelow, deleteBelow-1, log.String())
	}
	t.Logf("%d records pushed before the deletion reached the consumer, %d counted lost", pushedBelow, lost)
}

// TestAGapIsCountedByWhereTheLogStarts: the offsets between the one
// expected and the one fetched are lost as deleted below the fetch's log
// start offset and as compacted above it; a transaction marker fills its
// offset and is not dispatched; a record before the one expected (a reset
// backwards) is no gap.
func TestAGapIsCountedByWhereTheLogStarts(t *testing.T) {
	t.Parallel()
	marker := kgo.NewRecordAttrs(kgo.RecordAttrsOpts{Transactional: true, Control: true})
	for _, tc := range []struct {
		name               string
		logStart           int64
		offsets            []int64
		control            int64 // the offset of a transaction marker, -1 for none
		deleted, compacted int
		dispatched         int
	}{
		{"should count nothing when the records follow each other", 0, []int64{5, 6, 7}, -1, 0, 0, 3},
		{"should count the offsets below the log start as deleted", 15, []int64{15, 16}, -1, 10, 0, 2},
		{"should split a gap across the log start", 10, []int64{15}, -1, 5, 5, 1},
		{"should count a gap inside the log as compacted", 0, []int64{15}, -1, 0, 10, 1},
		{"should let a transaction marker fill its offset", 0, []int64{5, 6, 7}, 6, 0, 0, 2},
		{"should count no gap for a record before the one expected", 0, []int64{3, 4, 5}, -1, 0, 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var log logBuffer
			r := &reader{
				metrics: newMetrics(prometheus.NewRegistry(), func() (int, int) { return 0, 0 }, func() bool { return true }),
				logger:  log.logger(),
				next:    map[int32]int64{0: 5},
			}
			dispatched := 0
			for _, o := range tc.offsets {
				rec := &kgo.Record{Partition: 0, Offset: o}
				if o == tc.control {
					rec.Attrs = marker
				}
				if r.inOrder(kgo.FetchPartition{LogStartOffset: tc.logStart}, rec) {
					dispatched++
				}
			}
			deleted := int(testutil.ToFloat64(r.metrics.lost.WithLabelValues("0", lostDeleted)))
			compacted := int(testutil.ToFloat64(r.metrics.lost.WithLabelValues("0", lostCompacted)))
			if deleted != tc.deleted || compacted != tc.compacted || dispatched != tc.dispatched {
				t.Errorf("%d deleted, %d compacted, %d dispatched; want %d, %d, %d", deleted, compacted, dispatched, tc.deleted, tc.compacted, tc.dispatched)
			}
			if lines := strings.Count(log.String(), "level=ERROR"); lines != min(tc.deleted, 1)+min(tc.compacted, 1) {
				t.Errorf("%d error lines for the gaps, want one per cause; the log:\n%s", lines, log.String())
			}
		})
	}
}

// TestTransactionMarkersAreNoLoss: two transactions of five records each,
// then a plain record, on the real broker. The commit markers take offsets
// 5 and 11; every record is pushed and nothing is counted lost.
func TestTransactionMarkersAreNoLoss(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	txn := b.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID(topic))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for first := 0; first < 10; first += 5 {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(t, txn, topic, 1, 1, first, 5)
		if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("commit the transaction: %v", err)
		}
	}
	produce(t, manualClient(t, b), topic, 1, 1, 10, 1)
	if end := b.EndOffsets(t, topic)[0]; end != 13 {
		t.Fatalf("end offset %d, want 13: eleven records and two markers", end)
	}

	rec := newRecorder()
	cfg := testConfig(b.Addrs(), topic, "0", startPusher(t, rec.backend()))
	cfg.ConsumeFromPosition = PositionStart
	c := startConsumer(t, cfg)
	waitCommitted(t, b, cfg.ConsumerGroup, topic, 30*time.Second)
	if got := rec.snapshot()[loadgen.Tenant(0)]; !slices.Equal(got, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}) {
		t.Errorf("steps pushed %v, want 0 to 10", got)
	}
	if n := testutil.CollectAndCount(c.metrics.lost); n != 0 {
		t.Errorf("%d series of lost records, want none: the gaps were transaction markers", n)
	}
}

// TestRecordsRemovedByCompactionAreCountedLost: Ferry's records share a
// key per tenant, so compacting its topic drops requests. Ten records of
// one tenant in a segment the real broker's cleaner compacts leave the
// last one: nine offsets missing inside the log, counted as compacted.
func TestRecordsRemovedByCompactionAreCountedLost(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	if b.Kind() != kafkatest.KindReal {
		t.Skipf("needs a real broker's log cleaner, not %s", b.Kind())
	}
	topic := b.CreateTopic(t, 1)
	adm := b.Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	compact := func(k, v string) kadm.AlterConfig { return kadm.AlterConfig{Name: k, Value: &v} }
	resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		compact("cleanup.policy", "compact"), compact("segment.ms", "100"), compact("min.cleanable.dirty.ratio", "0.01"),
	}, topic)
	if err == nil {
		_, err = resp.On(topic, nil)
	}
	if err != nil {
		t.Fatalf("make %s compacted: %v", topic, err)
	}
	cl := manualClient(t, b)
	produce(t, cl, topic, 1, 1, 0, 10)
	time.Sleep(200 * time.Millisecond)
	produce(t, cl, topic, 1, 1, 10, 1) // rolls the segment: the cleaner may take the first
	probe := b.Client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	waitFor(t, 90*time.Second, "the cleaner to compact the first segment", func() bool {
		fetches := probe.PollRecords(ctx, 1)
		if recs := fetches.Records(); len(recs) == 1 {
			probe.SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: {0: {Epoch: -1, Offset: 0}}})
			return recs[0].Offset > 0
		}
		return false
	})

	rec := newRecorder()
	cfg := testConfig(b.Addrs(), topic, "0", startPusher(t, rec.backend()))
	cfg.ConsumeFromPosition = PositionStart
	var log logBuffer
	c := startConsumerLogging(t, cfg, log.logger())
	waitCommitted(t, b, cfg.ConsumerGroup, topic, 30*time.Second)
	if got := rec.snapshot()[loadgen.Tenant(0)]; !slices.Equal(got, []int{9, 10}) {
		t.Errorf("steps pushed %v, want the two compaction kept", got)
	}
	if n, d := c.lost(lostCompacted), c.lost(lostDeleted); n != 9 || d != 0 {
		t.Errorf("%d records counted lost as compacted and %d as deleted, want 9 and 0", n, d)
	}
	if !strings.Contains(log.String(), "partition=0 cause=compacted from_offset=0 to_offset=8 records=9") {
		t.Errorf("no error line for the compacted offsets 0 to 8; the log:\n%s", log.String())
	}
}

// TestATruncatedLogIsLoggedAsAnError: franz-go reports a log truncated
// under the consumer as ErrDataLoss, a fetch error; it gets an error line
// of its own, while an ordinary fetch error stays a rate-limited warning.
func TestATruncatedLogIsLoggedAsAnError(t *testing.T) {
	t.Parallel()
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1")) // never dialled
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var log logBuffer
	r := &reader{
		kafka:     cl,
		metrics:   newMetrics(prometheus.NewRegistry(), func() (int, int) { return 0, 0 }, func() bool { return true }),
		logger:    log.logger(),
		fetchLogs: logging.NewLimiterN(1, time.Second),
	}
	fetchError := func(err error) {
		r.fetchError(context.Background(), kgo.FetchTopicPartition{Topic: "t", FetchPartition: kgo.FetchPartition{Partition: 2, Err: err}})
	}
	fetchError(errors.New("broker gone"))
	if strings.Contains(log.String(), "level=ERROR") {
		t.Errorf("an ordinary fetch error logged as an error:\n%s", log.String())
	}
	fetchError(&kgo.ErrDataLoss{Topic: "t", Partition: 2, ConsumedTo: 40, ResetTo: 30})
	if !strings.Contains(log.String(), `level=ERROR msg="kafka lost records of this partition: its log was truncated" partition=2`) {
		t.Errorf("the truncation was not logged as an error:\n%s", log.String())
	}
}
