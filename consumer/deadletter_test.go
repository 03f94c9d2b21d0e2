package consumer

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// readAll reads every record of topic from the start until it has n.
func readAll(t *testing.T, b *kafkatest.Broker, topic string, n int) []*kgo.Record {
	t.Helper()
	cl := b.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		f := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %s: got %d records, want %d: %v", topic, len(out), n, err)
		}
		out = append(out, f.Records()...)
	}
	return out
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func TestClientErrorsGoToTheDeadLetterTopic(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	dlq := b.CreateTopic(t, 1)
	garbage := []byte{0x0a, 0xff, 0xff, 0x01}
	produceRecords(t, manualClient(t, b),
		&kgo.Record{Topic: topic, Key: []byte("tenant-0"), Value: testShape.Marshal("tenant-0", 0)},
		&kgo.Record{Topic: topic, Key: []byte("tenant-0"), Value: garbage},
		&kgo.Record{Topic: topic, Key: []byte("tenant-0"), Value: testShape.Marshal("tenant-0", 1)},
	)
	rec := newRecorder()
	rec.fail = func(_ string, step int) error {
		if step == 1 {
			return backend.NewClientError("sample too old")
		}
		return nil
	}
	addr := startPusher(t, rec.backend())
	cfg := testConfig(b.Addrs(), topic, "0", addr)
	cfg.DLQTopic = dlq
	startConsumer(t, cfg)
	waitCommitted(t, b, cfg.ConsumerGroup, topic, time.Minute)

	got := readAll(t, b, dlq, 2)
	want := []struct {
		offset, cause string
		value         []byte
	}{
		{"1", "undecodable", garbage},
		{"2", "rejected", testShape.Marshal("tenant-0", 1)},
	}
	for i, w := range want {
		r := got[i]
		if string(r.Key) != "tenant-0" || string(r.Value) != string(w.value) {
			t.Errorf("dead letter %d: key %q and value of %d bytes, want the original record", i, r.Key, len(r.Value))
		}
		for k, v := range map[string]string{
			HeaderSourceTopic: topic, HeaderSourcePartition: "0", HeaderSourceOffset: w.offset,
			HeaderErrorClass: "client_error", HeaderErrorCause: w.cause,
		} {
			if h := header(r, k); h != v {
				t.Errorf("dead letter %d: header %s = %q, want %q", i, k, h, v)
			}
		}
		if header(r, HeaderErrorReason) == "" {
			t.Errorf("dead letter %d has no reason", i)
		}
	}
}

func TestFailingDeadLetterWriteIsRetriedAndNotCommittedPast(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	produceRecords(t, manualClient(t, b),
		&kgo.Record{Topic: topic, Key: []byte("tenant-0"), Value: testShape.Marshal("tenant-0", 0)},
		&kgo.Record{Topic: topic, Key: nil, Value: []byte("no tenant")},
	)
	rec := newRecorder()
	addr := startPusher(t, rec.backend())
	cfg := testConfig(b.Addrs(), topic, "0", addr)
	cfg.DLQTopic = topic + "-dlq" // does not exist yet: writes fail
	c := startConsumer(t, cfg)
	waitFor(t, 30*time.Second, "the good record committed", func() bool {
		return b.CommittedOffsets(t, cfg.ConsumerGroup, topic)[0] == 1
	})
	time.Sleep(2 * time.Second)
	if got := b.CommittedOffsets(t, cfg.ConsumerGroup, topic)[0]; got != 1 {
		t.Fatalf("committed %d past a record whose dead-letter write fails", got)
	}
	if s := c.Stats(); s.Skipped != 0 {
		t.Fatalf("skipped = %d before the dead-letter write succeeded", s.Skipped)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := b.Admin(t).CreateTopic(ctx, 1, 1, nil, cfg.DLQTopic); err != nil {
		t.Fatalf("create %s: %v", cfg.DLQTopic, err)
	}
	t.Cleanup(func() { _, _ = b.Admin(t).DeleteTopic(context.Background(), cfg.DLQTopic) })
	waitCommitted(t, b, cfg.ConsumerGroup, topic, time.Minute)
	if got := readAll(t, b, cfg.DLQTopic, 1); header(got[0], HeaderErrorCause) != "empty_key" {
		t.Errorf("dead letter cause %q, want empty_key", header(got[0], HeaderErrorCause))
	}
}

// createTopicWith creates a one-partition topic with configs, deleted when
// the test ends.
func createTopicWith(t *testing.T, b *kafkatest.Broker, name string, configs map[string]*string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := b.Admin(t).CreateTopic(ctx, 1, 1, configs, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	t.Cleanup(func() { _, _ = b.Admin(t).DeleteTopic(context.Background(), name) })
}

// TestOversizedDeadLetterIsWrittenWithoutItsValue: a client-error record
// larger than the dead-letter topic's max.message.bytes (and franz-go's
// default batch limit is beside the point: 200 KiB is under it) is written
// without its value, with headers that say where it came from and how big
// it was, and its partition is committed past it.
func TestOversizedDeadLetterIsWrittenWithoutItsValue(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	dlq := topic + "-dlq"
	limit := "65536"
	createTopicWith(t, b, dlq, map[string]*string{"max.message.bytes": &limit})
	big := make([]byte, 200<<10)
	for i := range big {
		big[i] = 0xff // not a WriteRequest: undecodable
	}
	produceRecords(t, manualClient(t, b),
		&kgo.Record{Topic: topic, Key: []byte("tenant-0"), Value: big},
		&kgo.Record{Topic: topic, Key: []byte("tenant-0"), Value: testShape.Marshal("tenant-0", 0)},
	)
	rec := newRecorder()
	addr := startPusher(t, rec.backend())
	cfg := testConfig(b.Addrs(), topic, "0", addr)
	cfg.DLQTopic = dlq
	c := startConsumer(t, cfg)
	waitCommitted(t, b, cfg.ConsumerGroup, topic, time.Minute)

	got := readAll(t, b, dlq, 1)[0]
	if len(got.Value) != 0 || string(got.Key) != "tenant-0" {
		t.Errorf("dead letter: key %q, value of %d bytes; want the key and no value", got.Key, len(got.Value))
	}
	for k, v := range map[string]string{
		HeaderSourceTopic: topic, HeaderSourcePartition: "0", HeaderSourceOffset: "0",
		HeaderErrorCause: "undecodable", HeaderOriginalSize: "204800",
	} {
		if h := header(got, k); h != v {
			t.Errorf("dead letter: header %s = %q, want %q", k, h, v)
		}
	}
	if header(got, HeaderValueDropped) == "" || header(got, HeaderErrorReason) == "" {
		t.Errorf("dead letter: no %s or %s header", HeaderValueDropped, HeaderErrorReason)
	}
	if n := testutil.ToFloat64(c.metrics.deadLetterValueDropped); n != 1 {
		t.Errorf("%s = %v, want 1", "ferry_consumer_dead_letters_value_dropped_total", n)
	}
}

// TestDeadLetterWriteIsGivenUpAfterTheLimit: a dead-letter topic that
// cannot take writes (here: it does not exist) makes /ready fail, and after
// -dlq.give-up-after the record is skipped without a copy, counted, and
// committed past: the partition does not stall forever.
func TestDeadLetterWriteIsGivenUpAfterTheLimit(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	produceRecords(t, manualClient(t, b),
		&kgo.Record{Topic: topic, Key: []byte("tenant-0"), Value: []byte{0x0a, 0xff, 0xff, 0x01}},
		&kgo.Record{Topic: topic, Key: []byte("tenant-0"), Value: testShape.Marshal("tenant-0", 0)},
	)
	rec := newRecorder()
	addr := startPusher(t, rec.backend())
	cfg := testConfig(b.Addrs(), topic, "0", addr)
	cfg.DLQTopic = topic + "-missing-dlq"
	cfg.DLQGiveUpAfter = 3 * time.Second
	cfg.MaxLagAtStartup = 0
	c := startConsumer(t, cfg)
	var readyErr error
	waitFor(t, 30*time.Second, "/ready to report the failing dead-letter topic", func() bool {
		readyErr = c.Ready()
		return readyErr != nil && strings.Contains(readyErr.Error(), "dead-letter")
	})
	waitCommitted(t, b, cfg.ConsumerGroup, topic, time.Minute)
	if n := testutil.ToFloat64(c.metrics.deadLetterGivenUp); n != 1 {
		t.Errorf("ferry_consumer_dead_letters_given_up_total = %v, want 1", n)
	}
	if s := c.Stats(); s.Skipped != 1 {
		t.Errorf("skipped = %d, want 1", s.Skipped)
	}
	if got := rec.snapshot()["tenant-0"]; len(got) != 1 {
		t.Errorf("pushed steps %v, want the good record after the given-up one", got)
	}
	if err := c.Ready(); err != nil && strings.Contains(err.Error(), "dead-letter") {
		t.Errorf("/ready still reports the dead-letter topic after giving up: %v", err)
	}
}

func TestDeadLetterErrorPredicates(t *testing.T) {
	for _, tc := range []struct {
		err                 error
		record, destination bool
	}{
		{fmt.Errorf("produce: %w", kerr.MessageTooLarge), true, false},
		{kerr.RecordListTooLarge, true, false},
		{kerr.InvalidRecord, true, false},
		{fmt.Errorf("produce: %w", kerr.UnknownTopicOrPartition), false, true},
		{kerr.TopicAuthorizationFailed, false, true},
		{kerr.ClusterAuthorizationFailed, false, true},
		{kerr.NotLeaderForPartition, false, false},
		{context.DeadlineExceeded, false, false},
	} {
		if got := IsDeadLetterRecordError(tc.err); got != tc.record {
			t.Errorf("IsDeadLetterRecordError(%v) = %v", tc.err, got)
		}
		if got := IsDeadLetterDestinationError(tc.err); got != tc.destination {
			t.Errorf("IsDeadLetterDestinationError(%v) = %v", tc.err, got)
		}
	}
}
