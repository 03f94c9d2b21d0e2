package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/loadgen"
)

// backlog is a pre-produced topic.
type backlog struct {
	Topic   string
	Shape   Shape
	Records int64
	Bytes   int64 // record values
	Samples int64
	Took    time.Duration
}

// kafkaSide is the run's Kafka: the broker, its clients and the topics the
// run created, which deleteTopics removes at the end. The env embeds it,
// so a stage reaches Kafka through these methods.
type kafkaSide struct {
	compression string // -compression, of every backlog produced
	broker      *broker
	kcl         *kgo.Client
	adm         *kadm.Client
	topics      []string
}

// compressionCodec maps -compression to franz-go's codec.
func compressionCodec(name string) kgo.CompressionCodec {
	switch name {
	case "snappy":
		return kgo.SnappyCompression()
	case "lz4":
		return kgo.Lz4Compression()
	case "zstd":
		return kgo.ZstdCompression()
	case "gzip":
		return kgo.GzipCompression()
	default:
		return kgo.NoCompression()
	}
}

// createTopic creates a fresh topic named prefix plus a random suffix and
// waits until every partition has a leader.
func (e *kafkaSide) createTopic(ctx context.Context, prefix string, partitions int) (string, error) {
	name := fmt.Sprintf("bench-%s-%08x", prefix, rand.Uint32())
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	resp, err := e.adm.CreateTopic(ctx, int32(partitions), 1, nil, name) //nolint:gosec // small
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return "", fmt.Errorf("create topic %s: %w", name, err)
	}
	e.topics = append(e.topics, name)
	for {
		md, err := e.adm.Metadata(ctx, name)
		if err == nil {
			td := md.Topics[name]
			ready := td.Err == nil && len(td.Partitions) == partitions
			for _, p := range td.Partitions {
				ready = ready && p.Err == nil && p.Leader >= 0
			}
			if ready {
				return name, nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("topic %s not ready: %w", name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// deleteTopics deletes the topics the run created (best effort).
func (e *kafkaSide) deleteTopics() {
	if len(e.topics) == 0 || e.broker.kind == kindFake {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = e.adm.DeleteTopics(ctx, e.topics...)
	e.topics = nil
}

// producer returns a client producing with the run's compression. Records
// carry their partition: tenant i goes to partition i mod P, so partitions
// are balanced and a tenant stays on one partition, as keying by tenant
// guarantees in production.
func (e *kafkaSide) producer(opts ...kgo.Opt) (*kgo.Client, error) {
	all := append([]kgo.Opt{
		kgo.SeedBrokers(e.broker.addrs...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(compressionCodec(e.compression)),
		kgo.MaxBufferedRecords(20000),
		kgo.ProducerBatchMaxBytes(1 << 20),
	}, opts...)
	return kgo.NewClient(all...)
}

// sampleStart is the timestamp of step 0 of every backlog: recent enough for
// the TSDB backend (not too old, not in the future: steps are 1 ms apart).
var sampleStart = time.Now().Add(-time.Hour).Truncate(time.Second).UnixMilli()

// produceBacklog fills a fresh topic with shape.Records records, or, when
// minBytes > 0, with records until their values add up to minBytes.
func (e *kafkaSide) produceBacklog(ctx context.Context, prefix string, shape Shape, minBytes int64) (*backlog, error) {
	topic, err := e.createTopic(ctx, prefix, shape.Partitions)
	if err != nil {
		return nil, err
	}
	bl := &backlog{Topic: topic, Shape: shape}
	if err := e.extendBacklog(ctx, bl, shape.Records, minBytes); err != nil {
		return nil, err
	}
	return bl, nil
}

// extendBacklog appends records to bl's topic until it holds records
// records, or, when minBytes > 0, until their values add up to minBytes.
// The records continue where the backlog ended: tenant n mod T at step
// n / T, so every tenant's timestamps keep growing.
func (e *kafkaSide) extendBacklog(ctx context.Context, bl *backlog, records int, minBytes int64) error {
	shape := bl.Shape
	gen := loadgen.Shape{Series: shape.Series, StartMs: sampleStart, StepMs: 1}
	tenants := make([]string, shape.Tenants)
	for i := range tenants {
		tenants[i] = loadgen.Tenant(i)
	}
	n := int(bl.Records)
	start := time.Now()
	produced, _, err := e.produceRecords(ctx, func() *kgo.Record {
		if minBytes > 0 && bl.Bytes >= minBytes || minBytes <= 0 && n >= records {
			return nil
		}
		ti := n % shape.Tenants
		val := gen.Marshal(tenants[ti], n/shape.Tenants)
		bl.Bytes += int64(len(val))
		n++
		return &kgo.Record{Topic: bl.Topic, Partition: int32(ti % shape.Partitions), Key: []byte(tenants[ti]), Value: val} //nolint:gosec // small
	})
	if err != nil {
		return err
	}
	bl.Records += produced
	bl.Shape.Records = int(bl.Records)
	bl.Samples = bl.Records * int64(shape.Series)
	bl.Took += time.Since(start)
	return nil
}

// produceRecords produces the records next returns until it returns nil,
// and waits until all are acknowledged. Records carry their partition.
func (e *kafkaSide) produceRecords(ctx context.Context, next func() *kgo.Record) (n, bytes int64, err error) {
	cl, err := e.producer()
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	var (
		produceErr atomic.Pointer[error]
		wg         sync.WaitGroup
		topic      string
	)
	for {
		if err := ctx.Err(); err != nil {
			return n, bytes, err
		}
		if p := produceErr.Load(); p != nil {
			return n, bytes, fmt.Errorf("produce to %s: %w", topic, *p)
		}
		r := next()
		if r == nil {
			break
		}
		topic = r.Topic
		n++
		bytes += int64(len(r.Value))
		wg.Add(1)
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				produceErr.CompareAndSwap(nil, &err)
			}
			wg.Done()
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return n, bytes, err
	}
	wg.Wait()
	if p := produceErr.Load(); p != nil {
		return n, bytes, fmt.Errorf("produce to %s: %w", topic, *p)
	}
	return n, bytes, nil
}

// endOffsets returns the end offset of every partition of topic.
func (e *kafkaSide) endOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	listed, err := e.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out, nil
}

// committedReached reports whether group has committed, for every partition
// of ends, an offset at or past its end.
func (e *kafkaSide) committedReached(ctx context.Context, group, topic string, ends map[int32]int64) (bool, int64, error) {
	resp, err := e.adm.FetchOffsets(ctx, group)
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return false, 0, err
		}
		return false, 0, nil // group not there yet, coordinator loading: keep polling
	}
	var behind int64
	for p, end := range ends {
		o, ok := resp.Lookup(topic, p)
		switch {
		case !ok || o.Err != nil || o.At < 0:
			behind += end
		case o.At < end:
			behind += end - o.At
		}
	}
	return behind == 0, behind, nil
}

// warmGroups waits until the broker's group coordinator answers, so the
// first pipeline stage does not pay for creating __consumer_offsets.
func (e *kafkaSide) warmGroups(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		_, err := e.adm.FetchOffsets(ctx, "bench-warm-up")
		if err == nil || errors.Is(err, kerr.GroupIDNotFound) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("group coordinator not available: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
