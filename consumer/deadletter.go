package consumer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/consumer/lane"
	"github.com/ferrylabs/ferry/internal/logging"
)

// Headers of a dead-letter record, beside its original key and value.
const (
	HeaderSourceTopic     = "ferry-source-topic"
	HeaderSourcePartition = "ferry-source-partition"
	HeaderSourceOffset    = "ferry-source-offset"
	HeaderErrorClass      = "ferry-error-class"
	HeaderErrorCause      = "ferry-error-cause"
	HeaderErrorReason     = "ferry-error-reason"
	// HeaderOriginalSize is the size in bytes of the source record's value.
	HeaderOriginalSize = "ferry-original-size"
	// HeaderValueDropped is set on a dead letter written without its value
	// (and with its key cut to logging.MaxUntrusted bytes), because the
	// whole record could not be written to the dead-letter topic; it says
	// why.
	HeaderValueDropped = "ferry-value-dropped"
)

// deadLetterTimeout bounds one produce attempt, so a missing topic shows up
// as a logged retry instead of a silent stall.
const deadLetterTimeout = 10 * time.Second

// recordOverhead is more than the bytes a record batch of one record adds
// to the record's key, value and headers (a 61-byte batch header, the
// record's varints): what the pre-check leaves free under the limit.
const recordOverhead = 512

// IsDeadLetterRecordError reports whether err means that the record itself
// cannot be written to the dead-letter topic, whatever the retries: it is
// larger than the topic or the broker accepts, or the broker refuses it as
// invalid. Such a record is written again without its value.
func IsDeadLetterRecordError(err error) bool {
	for _, e := range []error{kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord, kerr.CorruptMessage} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// IsDeadLetterDestinationError reports whether err means that the
// dead-letter topic cannot take writes until an operator acts: it does not
// exist, the consumer may not write to it or the cluster's policy refuses
// it. Retrying helps only once the operator acted, so such failures are
// retried for -dlq.give-up-after at most.
func IsDeadLetterDestinationError(err error) bool {
	for _, e := range []error{
		kerr.UnknownTopicOrPartition, kerr.UnknownTopicID, kerr.InvalidTopicException,
		kerr.TopicAuthorizationFailed, kerr.ClusterAuthorizationFailed,
		kerr.SaslAuthenticationFailed, kerr.PolicyViolation, kerr.InvalidRequiredAcks,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// deadLetters is the dead-letter producer: a client of its own, sized to
// the topic's max.message.bytes (franz-go's default batch limit of about
// 1 MB would refuse larger records whatever the topic allows), and the
// state /ready reports.
type deadLetters struct {
	topic string
	opts  []kgo.Opt // the consumer's Kafka options (brokers, TLS, SASL)
	admin *kadm.Client

	mu     sync.Mutex
	client *kgo.Client // nil until the first dead letter
	limit  int         // the limit client was sized for

	// failing is set while a dead-letter write keeps failing: since when
	// and why. /ready reports it.
	failing atomic.Pointer[deadLetterFailure]
}

type deadLetterFailure struct {
	since time.Time
	err   error
}

// maxMessageBytes returns the dead-letter topic's max.message.bytes, or a
// broker's message.max.bytes when the topic's cannot be read. A topic that
// does not exist is an error (IsDeadLetterDestinationError), as is Kafka
// not answering.
func (d *deadLetters) maxMessageBytes(ctx context.Context) (int, error) {
	cs, err := d.admin.DescribeTopicConfigs(ctx, d.topic)
	if err == nil {
		rc, cerr := cs.On(d.topic, nil)
		if cerr == nil {
			cerr = rc.Err
		}
		if errors.Is(cerr, kerr.UnknownTopicOrPartition) || errors.Is(cerr, kerr.TopicAuthorizationFailed) {
			return 0, fmt.Errorf("dead-letter topic %q: %w", d.topic, cerr)
		}
		if n, ok := configInt(rc.Configs, "max.message.bytes"); cerr == nil && ok {
			return n, nil
		}
	}
	meta, merr := d.admin.BrokerMetadata(ctx)
	if merr != nil {
		return 0, fmt.Errorf("describe the dead-letter topic %q: %w", d.topic, errors.Join(err, merr))
	}
	for _, b := range meta.Brokers {
		bs, berr := d.admin.DescribeBrokerConfigs(ctx, b.NodeID)
		if berr != nil {
			continue
		}
		for _, rc := range bs {
			if n, ok := configInt(rc.Configs, "message.max.bytes"); ok {
				return n, nil
			}
		}
	}
	return 0, fmt.Errorf("neither the dead-letter topic %q's max.message.bytes nor a broker's message.max.bytes could be read", d.topic)
}

func configInt(cs []kadm.Config, key string) (int, bool) {
	for _, c := range cs {
		if c.Key == key && c.Value != nil {
			if n, err := strconv.Atoi(*c.Value); err == nil && n > 0 {
				return n, true
			}
		}
	}
	return 0, false
}

// producer returns a client sized to the topic's current limit, and the
// limit; refresh re-reads the limit and rebuilds the client when it
// changed.
func (d *deadLetters) producer(ctx context.Context, refresh bool) (*kgo.Client, int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.client != nil && !refresh {
		return d.client, d.limit, nil
	}
	limit, err := d.maxMessageBytes(ctx)
	if err != nil {
		if d.client != nil {
			return d.client, d.limit, nil
		}
		return nil, 0, err
	}
	// franz-go accepts batch limits in [512, 1 GiB].
	limit = min(max(limit, 1024), 1<<30)
	if d.client != nil && limit == d.limit {
		return d.client, d.limit, nil
	}
	cl, err := kgo.NewClient(append(d.opts[:len(d.opts):len(d.opts)],
		kgo.ProducerBatchMaxBytes(int32(limit)),
		kgo.MaxBufferedBytes(limit*4),
	)...)
	if err != nil {
		return nil, 0, fmt.Errorf("dead-letter producer: %w", err)
	}
	if d.client != nil {
		d.client.Close()
	}
	d.client, d.limit = cl, limit
	return cl, limit, nil
}

func (d *deadLetters) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.client != nil {
		d.client.Close()
		d.client = nil
	}
}

// ready reports a dead-letter write that fails because the topic cannot
// take writes (an operator must act), or that has failed for longer than
// limit whatever the cause.
func (d *deadLetters) ready(now time.Time, limit time.Duration) error {
	if f := d.failing.Load(); f != nil && (IsDeadLetterDestinationError(f.err) || now.Sub(f.since) > limit) {
		return fmt.Errorf("dead-letter writes to %q failing for %s: %w", d.topic, now.Sub(f.since).Round(time.Second), f.err)
	}
	return nil
}

// deadLetter writes it to the dead-letter topic. It returns true once the
// record is written, or once it was given up (see below), and false only
// when ctx is done first: the record is then not finished, nor committed
// past.
//
// A record larger than the topic accepts is written without its value.
// Failures are retried with backoff. While Kafka does not answer at all
// (an outage: nothing is committed either) the retries go on; once Kafka
// answers and the write has failed for -dlq.give-up-after, the record is
// given up: skipped without a copy, counted and logged at error level.
func (c *Consumer) deadLetter(ctx context.Context, it *lane.Item, cause, reason string) bool {
	d := c.dlq
	var first time.Time
	var mine *deadLetterFailure // what this write reported to /ready
	defer func() { d.failing.CompareAndSwap(mine, nil) }()
	stripped, refresh := false, false
	for attempt := 0; ; attempt++ {
		err := c.writeDeadLetter(ctx, it, cause, reason, &stripped, refresh)
		refresh = false
		if err == nil {
			c.metrics.deadLettered.Inc()
			if stripped {
				c.metrics.deadLetterValueDropped.Inc()
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		now := time.Now()
		if first.IsZero() {
			first = now
		}
		mine = &deadLetterFailure{since: first, err: err}
		d.failing.Store(mine)
		if IsDeadLetterRecordError(err) {
			refresh = true // the topic's limit may have been lowered
			if !stripped {
				stripped = true
				continue // at once: the value-less record is small
			}
		}
		if now.Sub(first) >= c.cfg.DLQGiveUpAfter && c.kafkaAnswers(ctx) {
			c.metrics.deadLetterGivenUp.Inc()
			c.logger.Error("dead-letter write given up after -dlq.give-up-after: the client-error record is skipped WITHOUT a copy in the dead-letter topic",
				"dlq_topic", c.cfg.DLQTopic, "tenant", logging.Untrusted(it.Tenant), "partition", it.Partition, "offset", it.Offset,
				"size", it.Size, "cause", cause, "failing_for", now.Sub(first).Round(time.Second),
				"give_up_after", c.cfg.DLQGiveUpAfter, "err", err)
			return true
		}
		delay := c.backoff.Delay(attempt, 0)
		c.metrics.retries.WithLabelValues("dead_letter").Inc()
		level := "dead-letter write failed: retrying, nothing is committed past this record"
		args := []any{"dlq_topic", c.cfg.DLQTopic, "partition", it.Partition, "offset", it.Offset,
			"retry_in", delay.Round(time.Millisecond), "give_up_in", max(0, c.cfg.DLQGiveUpAfter-now.Sub(first)).Round(time.Second), "err", err}
		if IsDeadLetterDestinationError(err) {
			c.logger.Error(level+" (the dead-letter topic cannot take writes: check it exists and the consumer may write to it)", args...)
		} else {
			c.logger.Warn(level, args...)
		}
		sleep(ctx, delay)
		if ctx.Err() != nil {
			return false
		}
	}
}

// writeDeadLetter makes one attempt. It writes the record without its
// value when *stripped is set or when the whole record would exceed the
// topic's limit (and then sets *stripped).
func (c *Consumer) writeDeadLetter(ctx context.Context, it *lane.Item, cause, reason string, stripped *bool, refresh bool) error {
	pctx, cancel := context.WithTimeout(ctx, deadLetterTimeout)
	defer cancel()
	cl, limit, err := c.dlq.producer(pctx, refresh)
	if err != nil {
		return err
	}
	rec := deadLetterRecord(c.cfg.DLQTopic, c.cfg.Topic, it, cause, reason)
	if !*stripped && recordSize(rec)+recordOverhead > limit {
		*stripped = true
	}
	if *stripped {
		stripValue(rec, fmt.Sprintf("record of %d bytes over the dead-letter topic's limit of %d bytes", recordSize(rec), limit))
	}
	// A produced record must not be reused: each attempt builds its own.
	return cl.ProduceSync(pctx, rec).FirstErr()
}

// kafkaAnswers reports whether the Kafka cluster answers a metadata
// request: a dead-letter failure while it does is not an outage.
func (c *Consumer) kafkaAnswers(ctx context.Context) bool {
	mctx, cancel := context.WithTimeout(ctx, deadLetterTimeout)
	defer cancel()
	_, err := c.admin.BrokerMetadata(mctx)
	var ne net.Error
	return err == nil || !(errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded))
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
			{Key: HeaderErrorReason, Value: []byte(logging.Untrusted(reason))},
			{Key: HeaderOriginalSize, Value: []byte(strconv.Itoa(len(it.Value)))},
		},
	}
}

// stripValue drops rec's value and cuts its key, saying why in a header:
// what is left is small whatever the source record was.
func stripValue(rec *kgo.Record, why string) {
	rec.Value = nil
	rec.Key = []byte(logging.Untrusted(string(rec.Key)))
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderValueDropped, Value: []byte(why)})
}

// recordSize is what franz-go counts against the batch limit.
func recordSize(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}
