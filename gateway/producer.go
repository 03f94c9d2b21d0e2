package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
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

// kafkaProducer is the producer on a franz-go client: acks from all
// in-sync replicas, idempotent writes (both franz-go's defaults, set
// explicitly so no option can drop them) and franz-go's default
// partitioner, which for keyed records is Kafka's own: partition =
// (murmur2(key) & 0x7fffffff) % partitions, as the Java client computes
// it. A tenant therefore always lands on one partition while the topic's
// partition count stays the same.
type kafkaProducer struct {
	cl    *kgo.Client
	adm   *kadm.Client
	topic string
}

// newKafkaProducer builds the client. It does not connect: franz-go dials
// on first use, and readiness says when the broker is reachable.
func newKafkaProducer(cfg Config, logger *slog.Logger) (*kafkaProducer, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(strings.Split(cfg.KafkaAddress, ",")...),
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
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
	return &kafkaProducer{cl: cl, adm: kadm.NewClient(cl), topic: cfg.Topic}, nil
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
	// Buffered for every callback, so none blocks after an early return.
	done := make(chan error, len(values))
	key := []byte(tenant)
	for _, v := range values {
		p.cl.Produce(ctx, &kgo.Record{Key: key, Value: v}, func(_ *kgo.Record, err error) { done <- err })
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

// ready reports whether the broker answers and knows the topic's
// partitions.
func (p *kafkaProducer) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	topics, err := p.adm.ListTopics(ctx, p.topic)
	if err != nil {
		return fmt.Errorf("kafka metadata: %w", err)
	}
	td, ok := topics[p.topic]
	switch {
	case !ok:
		return fmt.Errorf("topic %q not in metadata", p.topic)
	case td.Err != nil:
		return fmt.Errorf("topic %q: %w", p.topic, td.Err)
	case len(td.Partitions) == 0:
		return fmt.Errorf("topic %q has no partitions", p.topic)
	}
	return nil
}

func (p *kafkaProducer) close() { p.cl.Close() }
