package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/pusher"
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
			return pusher.NewClientError("sample too old")
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
