package consumer

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// The native buckets of ferry_consumer_produce_to_ack_seconds: the
// largest growth from one bucket to the next (client_golang picks schema 4,
// 2^(1/16) ≈ 1.044, the widest schema within it), and how many populated
// buckets it may have. 160 buckets of schema 4 span a factor of 1,000
// (1 ms to 1 s); a wider spread halves the resolution.
const (
	latencyBucketFactor = 1.05
	latencyMaxBuckets   = 160
)

// metrics are the consumer's Prometheus metrics (see docs/metrics.md).
type metrics struct {
	fetched     *prometheus.CounterVec
	fetchErrors *prometheus.CounterVec
	foreign     prometheus.Counter
	// lost counts records Kafka removed before they were read (reader.inOrder);
	// recreations, topics deleted and re-created (recreate.go).
	lost         *prometheus.CounterVec
	recreations  prometheus.Counter
	acks         *prometheus.CounterVec
	clientErrors *prometheus.CounterVec
	retries      *prometheus.CounterVec
	deadLettered prometheus.Counter
	// deadLetterValueDropped and deadLetterGivenUp count the dead letters
	// written without their value and those given up.
	deadLetterValueDropped prometheus.Counter
	deadLetterGivenUp      prometheus.Counter
	committed              *prometheus.GaugeVec
	commits                *prometheus.CounterVec
	highWatermark          *prometheus.GaugeVec
	inflight               prometheus.GaugeFunc
	inflightBytes          prometheus.GaugeFunc
	latency                prometheus.Histogram
	streamReady            prometheus.GaugeFunc
	decodeDuration         prometheus.Histogram
	parked                 prometheus.Counter
	reread                 prometheus.Counter
	// ackCounters are acks' children for the statuses lanes report, looked
	// up once: an ack is counted per record.
	ackCounters map[string]prometheus.Counter
}

// newMetrics registers the consumer's metrics. usage reports the records
// and bytes the lanes hold in memory; streamUp whether a stream to the
// pusher is open.
func newMetrics(reg prometheus.Registerer, usage func() (records, bytes int), streamUp func() bool) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		fetched: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_consumer_records_fetched_total",
			Help: "Records fetched from Kafka, by partition.",
		}, []string{"partition"}),
		fetchErrors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_consumer_fetch_errors_total",
			Help: "Fetch errors, by partition. Other partitions keep flowing.",
		}, []string{"partition"}),
		foreign: f.NewCounter(prometheus.CounterOpts{
			Name: "ferry_consumer_foreign_records_total",
			Help: "Records of a partition this consumer does not own, refused (a bug if not zero).",
		}),
		lost: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_consumer_records_lost_total",
			Help: "Records Kafka removed before this consumer read them, by partition and cause: deleted (below the log start offset: retention or DeleteRecords), compacted (missing inside the log, not transaction markers: log compaction), topic_deleted (produced to a topic deleted and re-created, and not read before; at least this many). Each is loss: alert on any.",
		}, []string{"partition", "cause"}),
		recreations: f.NewCounter(prometheus.CounterOpts{
			Name: "ferry_consumer_topic_recreations_total",
			Help: "Times the topic was found deleted and re-created under the same name; the consumer then reads the new topic from its start.",
		}),
		acks: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_consumer_acks_total",
			Help: "Answers to pushed requests, by status (ok, client_error, server_error) and stream errors (stream_error).",
		}, []string{"status"}),
		clientErrors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_consumer_skipped_records_total",
			Help: "Records skipped as client errors, by cause (empty_key, invalid_tenant, too_large, undecodable, refused: a series without labels, remote-write 2.0 or snappy, rejected, expired: deleted from Kafka while parked).",
		}, []string{"cause"}),
		retries: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_consumer_retries_total",
			Help: "Requests retried, by cause (server_error, stream_error, dead_letter).",
		}, []string{"cause"}),
		parked: f.NewCounter(prometheus.CounterOpts{
			Name: "ferry_consumer_parked_records_total",
			Help: "Records of a tenant being retried whose values were dropped from memory, to be read from Kafka again (-consumer.retrying-tenant-records).",
		}),
		reread: f.NewCounter(prometheus.CounterOpts{
			Name: "ferry_consumer_reread_records_total",
			Help: "Parked records read from Kafka again.",
		}),
		deadLettered: f.NewCounter(prometheus.CounterOpts{
			Name: "ferry_consumer_dead_lettered_records_total",
			Help: "Records skipped as client errors and written to the dead-letter topic (-dlq.topic).",
		}),
		deadLetterValueDropped: f.NewCounter(prometheus.CounterOpts{
			Name: "ferry_consumer_dead_letters_value_dropped_total",
			Help: "Dead letters written without their value (key cut, headers kept), because the whole record is larger than the dead-letter topic accepts.",
		}),
		deadLetterGivenUp: f.NewCounter(prometheus.CounterOpts{
			Name: "ferry_consumer_dead_letters_given_up_total",
			Help: "Client-error records skipped without a dead letter, because the dead-letter write kept failing for -dlq.give-up-after while Kafka answered.",
		}),
		committed: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ferry_consumer_committed_offset",
			Help: "Last committed offset (the next offset to read), by partition.",
		}, []string{"partition"}),
		commits: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_consumer_commits_total",
			Help: "Offset commits, by result (ok, sync_failed, commit_failed).",
		}, []string{"result"}),
		highWatermark: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ferry_consumer_partition_high_watermark",
			Help: "The partition's end offset as of the last fetch (frozen while nothing is fetched: ferry_consumer_end_offset is listed even then).",
		}, []string{"partition"}),
		inflight: f.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ferry_consumer_inflight_records",
			Help: "Records fetched but not yet acknowledged, parked ones excepted: the window's count.",
		}, func() float64 { n, _ := usage(); return float64(n) }),
		inflightBytes: f.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ferry_consumer_inflight_bytes",
			Help: "Bytes of record values fetched but not yet acknowledged (parked records hold none).",
		}, func() float64 { _, n := usage(); return float64(n) }),
		latency: f.NewHistogram(prometheus.HistogramOpts{
			Name: "ferry_consumer_produce_to_ack_seconds",
			Help: "Time from a record's timestamp to its final acknowledgement.",
			// 0.5 ms to ~69 s in steps of 25%, for scrapers of the text
			// format. A p99 interpolated in its bucket is then only known
			// to within a tenth of its value (±10 ms near 100 ms), more
			// than the few ms a latency objective needs.
			Buckets: prometheus.ExponentialBuckets(0.0005, 1.25, 54),
			// The same observations as a native histogram, exposed to
			// scrapers that ask for protobuf: buckets about 4.4% wide
			// (schema 4), so a p99 near 100 ms is within about ±2 ms. Only
			// buckets with observations are exposed; the bound keeps a
			// record of a wild timestamp from growing it without end (the
			// resolution halves instead, until the reset an hour later).
			NativeHistogramBucketFactor:     latencyBucketFactor,
			NativeHistogramMaxBucketNumber:  latencyMaxBuckets,
			NativeHistogramMinResetDuration: time.Hour,
		}),
		streamReady: f.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ferry_consumer_pusher_stream_up",
			Help: "1 while the stream to the pusher is open.",
		}, func() float64 {
			if streamUp() {
				return 1
			}
			return 0
		}),
		decodeDuration: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "ferry_consumer_decode_seconds",
			Help:    "Time to decode one record.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 8),
		}),
	}
	m.ackCounters = map[string]prometheus.Counter{}
	for _, status := range []string{"ok", "client_error", "server_error", "stream_error"} {
		m.ackCounters[status] = m.acks.WithLabelValues(status)
	}
	return m
}

// ack returns the acks counter of status.
func (m *metrics) ack(status string) prometheus.Counter {
	if c, ok := m.ackCounters[status]; ok {
		return c
	}
	return m.acks.WithLabelValues(status)
}
