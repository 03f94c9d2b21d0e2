package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"
)

// producer puts a request's record values on Kafka under one key and
// returns once Kafka acknowledged all of them, or with the first error.
type producer interface {
	produce(ctx context.Context, tenant string, values [][]byte) error
	ready(ctx context.Context) error
	close()
}

// shardProducer is a producer that can put a tenant's records on the
// slots of its shard (shard.go). The gateway's Kafka producer is one; a
// producer that is not (a test's) is treated as a topic of one partition.
type shardProducer interface {
	// produceSlots is produce with values[k] on slot slots[k].
	produceSlots(ctx context.Context, tenant string, values [][]byte, slots []int) error
	// partitions is the topic's partition count.
	partitions(ctx context.Context) (int, error)
}

// kafkaProducer is the producer on a franz-go client: acks from all
// in-sync replicas, idempotent writes (both franz-go's defaults, set
// explicitly so no option can drop them) and the shard partitioner, which
// for a record without a slot is franz-go's default for keyed records,
// Kafka's own: partition = (murmur2(key) & 0x7fffffff) % partitions, as
// the Java client computes it. A tenant of shard size 1 therefore always
// lands on one partition while the topic's partition count stays the
// same; a larger tenant's series each on one partition of its shard.
type kafkaProducer struct {
	cl    *kgo.Client
	adm   *kadm.Client
	topic string
	// count is the partition count franz-go last produced with (the
	// partitioner stores it), 0 before the first record.
	count *atomic.Int64
}

// newKafkaProducer builds the client. It does not connect: franz-go dials
// on first use, and readiness says when the broker is reachable.
func newKafkaProducer(cfg Config, logger *slog.Logger) (*kafkaProducer, error) {
	count := new(atomic.Int64)
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(cfg.KafkaAddress, ",")...),
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(shardPartitioner{partitions: count}),
		// Room for the largest record with its key and batch header.
		kgo.ProducerBatchMaxBytes(batchMaxBytes(cfg.MaxRecordBytes)),
		kgo.ProducerLinger(0),
		kgo.WithLogger(kslog.New(logger.With("component", "kafka"))),
	}
	security, err := cfg.Kafka.Opts()
	if err != nil {
		return nil, err
	}
	opts = append(opts, security...)
	cl, err := kgo.NewClient(append(opts, cfg.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return &kafkaProducer{cl: cl, adm: kadm.NewClient(cl), topic: cfg.Topic, count: count}, nil
}

// batchMaxBytes is franz-go's batch bound for records of up to
// maxRecord bytes: at least its default, and room for the largest record
// with its key and batch header.
func batchMaxBytes(maxRecord int) int32 {
	n := max(maxRecord+4096, 1_000_012)
	if n > math.MaxInt32 {
		return math.MaxInt32
	}
	return int32(n)
}

func (p *kafkaProducer) produce(ctx context.Context, tenant string, values [][]byte) error {
	return p.produceSlots(ctx, tenant, values, nil)
}

// produceSlots puts values[k] on slot slots[k] of the tenant's shard; a
// nil slots puts every value on the tenant's own partition.
func (p *kafkaProducer) produceSlots(ctx context.Context, tenant string, values [][]byte, slots []int) error {
	// Buffered for every callback, so none blocks after an early return.
	done := make(chan error, len(values))
	key := []byte(tenant)
	for k, v := range values {
		r := &kgo.Record{Key: key, Value: v}
		if slots != nil {
			r.Context = withSlot(ctx, slots[k])
		}
		p.cl.Produce(ctx, r, func(_ *kgo.Record, err error) { done <- err })
	}
	var first error
	for range values {
		select {
		case err := <-done:
			if err != nil && first == nil {
				first = err
			}
		case <-ctx.Done():
			// Records still in flight may yet be written: the client's
			// retry then writes them again, at least once as promised.
			return fmt.Errorf("produce %d records: %w", len(values), ctx.Err())
		}
	}
	if first != nil {
		return fmt.Errorf("produce %d records: %w", len(values), first)
	}
	return nil
}

// recordTooLarge reports whether err says Kafka will never take the
// record, so the request is the client's problem, not a reason to retry.
func recordTooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// partitions is the topic's partition count: the one franz-go last
// produced with, so that a request's series are grouped for the count
// their records will be partitioned with; before the first record, the
// one metadata says. franz-go refreshes it every metadata max age (5
// minutes by default) and when a produce fails.
func (p *kafkaProducer) partitions(ctx context.Context) (int, error) {
	if n := p.count.Load(); n > 0 {
		return int(n), nil
	}
	return p.metadataPartitions(ctx)
}

// metadataPartitions is the topic's partition count as metadata says.
func (p *kafkaProducer) metadataPartitions(ctx context.Context) (int, error) {
	topics, err := p.adm.ListTopics(ctx, p.topic)
	if err != nil {
		return 0, fmt.Errorf("kafka metadata: %w", err)
	}
	td, ok := topics[p.topic]
	switch {
	case !ok:
		return 0, fmt.Errorf("topic %q not in metadata", p.topic)
	case td.Err != nil:
		return 0, fmt.Errorf("topic %q: %w", p.topic, td.Err)
	case len(td.Partitions) == 0:
		return 0, fmt.Errorf("topic %q has no partitions", p.topic)
	}
	return len(td.Partitions), nil
}

// ready reports whether the broker answers and knows the topic's
// partitions.
func (p *kafkaProducer) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := p.metadataPartitions(ctx)
	return err
}

func (p *kafkaProducer) close() { p.cl.Close() }
