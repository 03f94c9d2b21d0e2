package consumer

import (
	"context"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/consumer/lane"
)

// Headers of a dead-letter record, beside its original key and value.
const (
	HeaderSourceTopic     = "ferry-source-topic"
	HeaderSourcePartition = "ferry-source-partition"
	HeaderSourceOffset    = "ferry-source-offset"
	HeaderErrorClass      = "ferry-error-class"
	HeaderErrorCause      = "ferry-error-cause"
	HeaderErrorReason     = "ferry-error-reason"
)

// deadLetterTimeout bounds one produce attempt, so a missing topic shows up
// as a logged retry instead of a silent stall.
const deadLetterTimeout = 10 * time.Second

// deadLetter writes it to the dead-letter topic, retrying with backoff
// until the write succeeds (true) or ctx is done (false).
func (c *Consumer) deadLetter(ctx context.Context, it *lane.Item, cause, reason string) bool {
	rec := deadLetterRecord(c.cfg.DLQTopic, c.cfg.Topic, it, cause, reason)
	for attempt := 0; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, deadLetterTimeout)
		err := c.kafka.ProduceSync(pctx, rec).FirstErr()
		cancel()
		if err == nil {
			c.metrics.deadLettered.Inc()
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		delay := c.backoff.Delay(attempt, 0)
		c.metrics.retries.WithLabelValues("dead_letter").Inc()
		c.logger.Warn("dead-letter write failed: retrying, nothing is committed past this record",
			"dlq_topic", c.cfg.DLQTopic, "partition", it.Partition, "offset", it.Offset,
			"retry_in", delay.Round(time.Millisecond), "err", err)
		sleep(ctx, delay)
		if ctx.Err() != nil {
			return false
		}
		rec = deadLetterRecord(c.cfg.DLQTopic, c.cfg.Topic, it, cause, reason) // a produced record must not be reused
	}
}

func deadLetterRecord(dlq, source string, it *lane.Item, cause, reason string) *kgo.Record {
	return &kgo.Record{
		Topic: dlq,
		Key:   []byte(it.Tenant),
		Value: it.Value,
		Headers: []kgo.RecordHeader{
			{Key: HeaderSourceTopic, Value: []byte(source)},
			{Key: HeaderSourcePartition, Value: []byte(strconv.Itoa(int(it.Partition)))},
			{Key: HeaderSourceOffset, Value: []byte(strconv.FormatInt(it.Offset, 10))},
			{Key: HeaderErrorClass, Value: []byte("client_error")},
			{Key: HeaderErrorCause, Value: []byte(cause)},
			{Key: HeaderErrorReason, Value: []byte(reason)},
		},
	}
}
