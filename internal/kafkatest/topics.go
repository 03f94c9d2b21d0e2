package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// This file holds the topic and offset helpers of a Broker.

// CreateTopic creates a topic with the given number of partitions (and
// replication factor 1, or 3 on a [Cluster]), named after the test plus a random suffix so that
// parallel tests and reruns on a long-lived broker never share a topic. It
// returns once the broker's metadata shows every partition with a leader, so
// producing to it right away works. The topic is deleted when the test ends.
func (b *Broker) CreateTopic(t testing.TB, partitions int32) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	name := topicName(t.Name())
	if _, err := b.adm.CreateTopic(ctx, partitions, b.replicationFactor(), nil, name); err != nil {
		t.Fatalf("kafkatest: create topic %q with %d partitions: %v", name, partitions, err)
	}
	t.Cleanup(func() { b.deleteTopic(t, name) })
	if err := waitTopic(ctx, b.adm, name, partitions); err != nil {
		t.Fatalf("kafkatest: topic %q: %v", name, err)
	}
	return name
}

// replicationFactor is the replication factor of the topics CreateTopic
// makes: 1 on a single broker, every broker on a Cluster.
func (b *Broker) replicationFactor() int16 {
	if b.replicas > 0 {
		return b.replicas
	}
	return 1
}

// EndOffsets returns the end offset (the offset the next record will get) of
// every partition of topic. An unknown topic fails the test.
func (b *Broker) EndOffsets(t testing.TB, topic string) map[int32]int64 {
	t.Helper()
	var out map[int32]int64
	err := retry(func(ctx context.Context) error {
		listed, err := b.adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return err
		}
		if err := listed.Error(); err != nil {
			return err
		}
		ps, ok := listed[topic]
		if !ok || len(ps) == 0 {
			return fmt.Errorf("no partitions listed: %w", kerr.UnknownTopicOrPartition)
		}
		out = make(map[int32]int64, len(ps))
		for p, o := range ps {
			out[p] = o.Offset
		}
		return nil
	})
	if err != nil {
		t.Fatalf("kafkatest: end offsets of %q: %v", topic, err)
	}
	return out
}

// CommittedOffsets returns the offsets that group has committed for topic,
// by partition (Kafka convention: the next offset to consume). Partitions
// without a commit, and groups that do not exist, are simply absent from the
// map; it reads without joining the group, so it works while consumers run.
func (b *Broker) CommittedOffsets(t testing.TB, group, topic string) map[int32]int64 {
	t.Helper()
	var out map[int32]int64
	err := retry(func(ctx context.Context) error {
		resp, err := b.adm.FetchOffsets(ctx, group)
		out = make(map[int32]int64)
		if errors.Is(err, kerr.GroupIDNotFound) {
			return nil // never committed: an empty map, not an error
		}
		if err != nil {
			return err
		}
		for p, o := range resp[topic] {
			if o.Err != nil {
				return fmt.Errorf("partition %d: %w", p, o.Err)
			}
			if o.At >= 0 {
				out[p] = o.At
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("kafkatest: committed offsets of group %q, topic %q: %v", group, topic, err)
	}
	return out
}

// waitTopic polls metadata until topic has the given number of partitions,
// each with a leader. CreateTopics returns when the controller has accepted
// the topic, which is before the broker serves it.
func waitTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int32) error {
	var last error
	for {
		md, err := adm.Metadata(ctx, topic)
		switch {
		case err != nil:
			last = err
		default:
			last = topicReady(md.Topics[topic], partitions)
		}
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready before the deadline: %w", last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func topicReady(td kadm.TopicDetail, partitions int32) error {
	if td.Err != nil {
		return td.Err
	}
	if len(td.Partitions) != int(partitions) {
		return fmt.Errorf("metadata shows %d of %d partitions", len(td.Partitions), partitions)
	}
	for p, pd := range td.Partitions {
		if pd.Err != nil {
			return fmt.Errorf("partition %d: %w", p, pd.Err)
		}
		if pd.Leader < 0 {
			return fmt.Errorf("partition %d has no leader yet", p)
		}
	}
	return nil
}

func (b *Broker) deleteTopic(t testing.TB, topic string) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if _, err := b.adm.DeleteTopic(ctx, topic); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
		// Not a test failure: the broker is throw-away and names are unique.
		t.Logf("kafkatest: deleting topic %q: %v", topic, err)
	}
}

// retry calls fn until it succeeds, fails with a non-retriable Kafka error,
// or opTimeout passes. Right after a topic is created or the broker
// restarts, Kafka answers for a moment with retriable errors (leader not
// available, coordinator loading), which a test helper should wait out. An
// unknown topic is retriable too, but is most likely a wrong name: it gets
// a few seconds only.
func retry(fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	unknownUntil := time.Now().Add(5 * time.Second)
	for {
		err := fn(ctx)
		if err == nil || !kerr.IsRetriable(err) && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		if errors.Is(err, kerr.UnknownTopicOrPartition) && time.Now().After(unknownUntil) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// topicName makes a valid, unique Kafka topic name from a test name:
// characters Kafka rejects (and '.', which Kafka warns collides with '_' in
// metric names) become '-', and a random suffix keeps reruns and parallel
// tests apart.
func topicName(testName string) string {
	const maxBase = 200 // Kafka allows 249 characters
	var sb strings.Builder
	for _, r := range testName {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			sb.WriteRune(r)
		default:
			sb.WriteByte('-')
		}
		if sb.Len() >= maxBase {
			break
		}
	}
	base := sb.String()
	if base == "" {
		base = "test"
	}
	return fmt.Sprintf("%s-%08x", base, rand.Uint32())
}
