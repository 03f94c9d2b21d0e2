package consumer

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/loadgen"
)

// recreateTopic deletes topic and creates it again with one partition,
// waiting out Kafka's asynchronous deletion.
func recreateTopic(t *testing.T, adm *kadm.Client, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := adm.DeleteTopic(ctx, topic); err != nil {
		t.Fatalf("delete topic %s: %v", topic, err)
	}
	for {
		_, err := adm.CreateTopic(ctx, 1, 1, nil, topic)
		if err == nil {
			break
		}
		if !errors.Is(err, kerr.TopicAlreadyExists) && !kerr.IsRetriable(err) || ctx.Err() != nil {
			t.Fatalf("create topic %s again: %v", topic, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitFor(t, 30*time.Second, "the new topic's leader", func() bool {
		ends, err := adm.ListEndOffsets(ctx, topic)
		return err == nil && ends.Error() == nil
	})
}

// TestATopicDeletedAndRecreatedIsFollowedFromItsStart: ten records read,
// the topic deleted and re-created, ten more produced to the new topic.
// Every one is pushed, the old topic's committed offset (10) is not
// applied to the new topic (it would skip all ten), the group ends
// committed at the new topic's end, the re-creation is counted and logged,
// nothing is counted lost, and the consumer stays ready.
func TestATopicDeletedAndRecreatedIsFollowedFromItsStart(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	rec := newRecorder()
	addr := startPusher(t, rec.backend())
	cfg := testConfig(b.Addrs(), topic, "0", addr)
	var log logBuffer
	c := startConsumerLogging(t, cfg, log.logger())

	produce(t, manualClient(t, b), topic, 1, 1, 0, 10)
	waitCommitted(t, b, cfg.ConsumerGroup, topic, 30*time.Second)
	recreateTopic(t, b.Admin(t), topic)
	// A new producer: the first one's client will not adopt the new topic ID.
	produce(t, manualClient(t, b), topic, 1, 1, 10, 10)

	tenant := loadgen.Tenant(0)
	waitFor(t, time.Minute, "the new topic's records pushed", func() bool { return len(rec.snapshot()[tenant]) >= 20 })
	waitCommitted(t, b, cfg.ConsumerGroup, topic, 30*time.Second)
	if got, want := rec.snapshot()[tenant], []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}; !slices.Equal(got, want) {
		t.Errorf("steps pushed %v, want %v", got, want)
	}
	if n := testutil.ToFloat64(c.metrics.recreations); n != 1 {
		t.Errorf("%v re-creations counted, want 1", n)
	}
	if n := testutil.CollectAndCount(c.metrics.lost); n != 0 {
		t.Errorf("%d series of lost records, want none: every record was read", n)
	}
	if !strings.Contains(log.String(), `level=ERROR msg="topic deleted and re-created: reading the new topic from its start"`) {
		t.Errorf("the re-creation was not logged; the log:\n%s", log.String())
	}
	if err := c.Ready(); err != nil {
		t.Errorf("not ready after following the new topic: %v", err)
	}
	if lags := c.Lags(time.Now()); len(lags) != 1 || lags[0].Records != 0 || lags[0].End != 10 {
		t.Errorf("lag after following the new topic %+v, want none at end offset 10", lags)
	}
}

// TestATopicRecreatedWhileTheConsumerWasStoppedIsReadFromItsStart: Kafka
// deletes the group's offsets with the topic, but a commit of the old
// topic's offset 10 can land after the deletion (a consumer stopping then).
// The restarted consumer must not apply it to the re-created topic, which
// holds 15 records by then: it reads all of them, counts the re-creation
// and says why.
func TestATopicRecreatedWhileTheConsumerWasStoppedIsReadFromItsStart(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	rec := newRecorder()
	addr := startPusher(t, rec.backend())
	cfg := testConfig(b.Addrs(), topic, "0", addr)
	produce(t, manualClient(t, b), topic, 1, 1, 0, 10)
	first := startConsumer(t, cfg)
	waitCommitted(t, b, cfg.ConsumerGroup, topic, 30*time.Second)
	first.stop(t)
	oldMetadata := first.reader.commitMetadata()

	adm := b.Admin(t)
	recreateTopic(t, adm, topic)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	late := kadm.Offsets{}
	late.Add(kadm.Offset{Topic: topic, Partition: 0, At: 10, LeaderEpoch: -1, Metadata: oldMetadata})
	if resp, err := adm.CommitOffsets(ctx, cfg.ConsumerGroup, late); err != nil || resp.Error() != nil {
		t.Fatalf("commit the old topic's offset late: %v %v", err, resp.Error())
	}
	produce(t, manualClient(t, b), topic, 1, 1, 10, 15)

	var log logBuffer
	c := startConsumerLogging(t, cfg, log.logger())
	tenant := loadgen.Tenant(0)
	waitFor(t, 30*time.Second, "the new topic's records pushed", func() bool { return len(rec.snapshot()[tenant]) >= 25 })
	waitCommitted(t, b, cfg.ConsumerGroup, topic, 30*time.Second)
	want := make([]int, 25)
	for i := range want {
		want[i] = i
	}
	if got := rec.snapshot()[tenant]; !slices.Equal(got, want) {
		t.Errorf("steps pushed %v, want 0 to 24", got)
	}
	if n := testutil.ToFloat64(c.metrics.recreations); n != 1 {
		t.Errorf("%v re-creations counted, want 1", n)
	}
	if !strings.Contains(log.String(), `level=ERROR msg="the committed offset belongs to a deleted topic of the same name: reading the re-created topic from its start" topic=`+topic+` partitions=[0] partition=0 committed=10`) {
		t.Errorf("the stale commit was not logged; the log:\n%s", log.String())
	}
}

// TestRecordsOfADeletedTopicNotYetReadAreCountedLost: the pusher holds
// every push while the consumer has fetched the start of 100 records, and
// the topic is deleted and re-created meanwhile. Each of the old topic's
// records is then either pushed or counted lost (topic_deleted), and the
// new topic's records are all pushed.
func TestRecordsOfADeletedTopicNotYetReadAreCountedLost(t *testing.T) {
	t.Parallel()
	const records = 100
	b := kafkatest.Current(t)
	topic, cfg, release, steps := gatedBacklog(t, b, records)
	defer release()
	c := startConsumer(t, cfg)
	waitFor(t, 30*time.Second, "the window full", func() bool { return c.Stats().Inflight == cfg.MaxInflightRequests })

	recreateTopic(t, b.Admin(t), topic)
	produce(t, manualClient(t, b), topic, 1, 1, 1000, 5)
	release()
	waitFor(t, time.Minute, "the new topic's records pushed", func() bool { return slices.Contains(steps(), 1004) })
	waitCommitted(t, b, cfg.ConsumerGroup, topic, 30*time.Second)

	got := steps()
	old, fresh := got[:len(got)-5], got[len(got)-5:]
	if !slices.Equal(fresh, []int{1000, 1001, 1002, 1003, 1004}) {
		t.Errorf("the new topic's steps pushed %v, want 1000 to 1004", fresh)
	}
	for i, s := range old {
		if s != i {
			t.Fatalf("the old topic's steps pushed %v, want a prefix of 0 to %d", old, records-1)
		}
	}
	lost := int(testutil.ToFloat64(c.metrics.lost.WithLabelValues("0", lostTopicDeleted)))
	if lost == 0 || len(old)+lost != records {
		t.Errorf("%d of the old topic's records pushed and %d counted lost, want a loss and %d in all", len(old), lost, records)
	}
	t.Logf("%d of the old topic's records pushed, %d counted lost", len(old), lost)
}
