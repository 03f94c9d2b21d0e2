// Package consumer is Ferry's Kafka side. It reads the partitions assigned
// to its instance, validates each record (its key, its size and the wire
// structure of its value) without decoding it, and forwards the record's
// bytes as they came to the push service over one gRPC stream; it commits
// to the consumer group only offsets whose records were all acknowledged.
// The per-tenant delivery (order, requests in flight, retries, parking) is
// package consumer/lane's; this package holds the Kafka parts (reader,
// tracker, committer, re-reader) and the stream. See docs/design.md, "The
// consumer".
package consumer

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/ferrylabs/ferry/internal/kafkaclient"
	"github.com/ferrylabs/ferry/internal/tlsreload"
)

// Positions accepted by -kafka.consume-from-position.
const (
	PositionLastOffset = "last-offset"
	PositionStart      = "start"
	PositionEnd        = "end"
	PositionTimestamp  = "timestamp"
)

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("invalid configuration")

// maxMessageBytes is the most -pusher.max-message-bytes may be: a pusher
// accepts messages of its -pusher.max-request-bytes plus 4 MiB, so a
// message of requests within 4 MiB fits whatever the pusher's limit.
const maxMessageBytes = 4 << 20

// Config is the consumer's configuration.
type Config struct {
	KafkaAddress         string
	Topic                string
	ConsumerGroup        string
	CommitInterval       time.Duration
	ConsumeFromPosition  string
	ConsumeFromTimestamp int64
	InstanceID           string
	Partitions           string
	FetchMaxBytes        int
	// FetchMaxDecompressed bounds a fetch once decompressed (fetchsize.go).
	FetchMaxDecompressed int
	DLQTopic             string
	DLQGiveUpAfter       time.Duration
	// Kafka is TLS and SASL, shared by every Kafka client of the consumer.
	Kafka kafkaclient.Config
	// PusherTLS is TLS to the pusher.
	PusherTLS tlsreload.Client

	PusherAddress         string
	MaxInflightRequests   int
	MaxInflightPerTenant  int
	MaxInflightBytes      int
	RetryingTenantRecords int
	MaxUncommitted        int
	MaxRequestBytes       int
	DecodeWorkers         int
	BackoffMin            time.Duration
	BackoffMax            time.Duration
	SyncTimeout           time.Duration
	ShutdownTimeout       time.Duration
	// MaxLagAtStartup and UnreachableTimeout decide /ready (lag.go).
	MaxLagAtStartup    time.Duration
	UnreachableTimeout time.Duration
	// MaxMessageRequests and MaxMessageBytes bound a PushBatch message
	// (batchWriter, stream.go); MaxMessageRequests 0 sends on Push instead.
	MaxMessageRequests int
	MaxMessageBytes    int
}

// RegisterFlags registers the consumer's flags on f.
func (c *Config) RegisterFlags(f *flag.FlagSet) {
	host, _ := os.Hostname()
	f.StringVar(&c.KafkaAddress, "kafka.address", "localhost:9092", "Kafka bootstrap brokers, comma-separated host:port.")
	f.StringVar(&c.Topic, "kafka.topic", "ingest", "Topic to consume.")
	f.StringVar(&c.ConsumerGroup, "kafka.consumer-group", "ferry", "Consumer group that stores the committed offsets. The consumer never joins it.")
	f.DurationVar(&c.CommitInterval, "kafka.commit-interval", time.Second, "How often the acknowledged watermark is committed, when it moved.")
	f.StringVar(&c.ConsumeFromPosition, "kafka.consume-from-position", PositionLastOffset,
		"Where to start a partition that has no committed offset: last-offset (the partition's start), start, end, or timestamp (see -kafka.consume-from-timestamp). A committed offset always wins.")
	f.Int64Var(&c.ConsumeFromTimestamp, "kafka.consume-from-timestamp", 0, "Milliseconds since the epoch to start from, with -kafka.consume-from-position=timestamp.")
	f.StringVar(&c.InstanceID, "instance-id", host, "Instance ID; its trailing number is the partition to read (consumer-3 reads partition 3) unless -kafka.partitions is set.")
	f.StringVar(&c.Partitions, "kafka.partitions", "", "Comma-separated partitions to read, instead of the one named by -instance-id.")
	// Kafka counts a fetch's bytes compressed; the client holds it
	// decompressed, about 9 times larger for snappy remote-write requests.
	// The decompressed bound is what holds the consumer's memory; see
	// docs/benchmarks.md, "What a consumer holds replaying a backlog".
	f.IntVar(&c.FetchMaxBytes, "kafka.fetch-max-bytes", 4<<20, "Most bytes one fetch from a broker may return, as Kafka counts them (compressed). See -kafka.fetch-max-decompressed-bytes.")
	f.IntVar(&c.FetchMaxDecompressed, "kafka.fetch-max-decompressed-bytes", 8<<20,
		"About the most bytes one fetch from a broker holds once decompressed: each fetch asks for this divided by the compression ratio of the batches read before it, and at most -kafka.fetch-max-bytes. The consumer's memory grows with it.")
	f.StringVar(&c.DLQTopic, "dlq.topic", "", "Dead-letter topic: every record skipped as a client error is written there with its key, value and headers naming its source and the error; a record larger than the topic's max.message.bytes is written without its value. Empty disables it. The topic must exist.")
	f.DurationVar(&c.DLQGiveUpAfter, "dlq.give-up-after", 5*time.Minute,
		"How long a dead-letter write may keep failing while Kafka answers (a missing topic, no permission to write) before the record is given up: skipped, counted in ferry_consumer_dead_letters_given_up_total and logged at error level. The trade-off: this is the only path where a client-error record may leave no copy; until then nothing is committed past it and its partition stalls. Records too large for the topic do not wait for it: they are written without their value.")
	c.Kafka.RegisterFlags(f)
	c.PusherTLS.RegisterFlagsWithPrefix("pusher", "pusher", f)
	f.StringVar(&c.PusherAddress, "pusher.address", "localhost:9095", "gRPC address of the push service.")
	// The window is what lets the pusher apply several requests of a
	// tenant together and put many in one stream message: at 1,000
	// tenants a partition, 512 records left about two per tenant in
	// flight. Its bytes bound is what holds the consumer's memory for
	// large records (docs/benchmarks.md, "The window").
	f.IntVar(&c.MaxInflightRequests, "consumer.max-inflight-requests", 4096, "Records decoded or pushed but not yet acknowledged; fetching pauses at this bound.")
	f.IntVar(&c.MaxInflightPerTenant, "consumer.max-inflight-per-tenant", 16, "Requests of one tenant on the stream at once, applied by the pusher in order. 1 waits for each answer before the next request: a tenant then gets one round trip per record.")
	f.IntVar(&c.RetryingTenantRecords, "consumer.retrying-tenant-records", 64, "Records kept in memory for a tenant whose requests are being retried; its further records are parked (values dropped, read from Kafka again when the tenant recovers), so it cannot fill the window and stall the other tenants.")
	f.IntVar(&c.MaxInflightBytes, "consumer.max-inflight-bytes", 8<<20, "Bytes of record values in flight; fetching pauses at this bound. A single larger record is let in when nothing else is in flight.")
	f.IntVar(&c.MaxUncommitted, "consumer.max-uncommitted-records", 50000, "Records a partition may be fetched past its watermark. Bounds what a crash replays when one tenant's record keeps failing while the others are acknowledged; at the bound fetching pauses until the watermark moves.")
	f.IntVar(&c.MaxRequestBytes, "pusher.max-request-bytes", 10<<20, "Largest record value sent to the pusher; larger records are client errors and skipped.")
	f.IntVar(&c.MaxMessageRequests, "pusher.max-message-requests", 256,
		"Most requests in one message of the stream to the pusher: the requests queued when a message is written go in it together, never waiting for more. 1 sends each alone; 0 uses the pusher's older Push stream, one request per message.")
	f.IntVar(&c.MaxMessageBytes, "pusher.max-message-bytes", 1<<20,
		"Most bytes of requests in one message of the stream to the pusher (see -pusher.max-message-requests), at most 4 MiB, which any pusher accepts on top of its -pusher.max-request-bytes; a larger request goes alone.")
	f.IntVar(&c.DecodeWorkers, "consumer.decode-workers", runtime.GOMAXPROCS(0), "Goroutines decoding records; the default is the number of usable CPUs (GOMAXPROCS).")
	f.DurationVar(&c.BackoffMin, "consumer.backoff-min", 100*time.Millisecond, "First delay before retrying a request that got a server error.")
	f.DurationVar(&c.BackoffMax, "consumer.backoff-max", 10*time.Second, "Longest delay between retries.")
	f.DurationVar(&c.SyncTimeout, "pusher.sync-timeout", 30*time.Second, "How long a commit waits for the pusher's sync.")
	f.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "How long a graceful stop may push what was fetched before the final commit.")
	f.DurationVar(&c.MaxLagAtStartup, "kafka.max-consumer-lag-at-startup", 15*time.Second,
		"At start-up, /ready fails until every owned partition has caught up to within this lag, measured from record timestamps: the oldest record not yet acknowledged is younger than this, or nothing is left to read. Once caught up, lagging no longer makes the consumer unready. 0 disables the check.")
	f.DurationVar(&c.UnreachableTimeout, "consumer.unreachable-timeout", time.Minute,
		"After start-up, /ready fails once the pusher or the Kafka brokers have been unreachable for this long.")
}

// Validate reports the first invalid setting, naming its flag.
func (c *Config) Validate() error {
	if _, err := c.Brokers(); err != nil {
		return err
	}
	if err := c.Kafka.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := c.PusherTLS.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if c.Topic == "" {
		return fmt.Errorf("%w: -kafka.topic must not be empty", ErrInvalidConfig)
	}
	if c.DLQTopic == c.Topic {
		return fmt.Errorf("%w: -dlq.topic must differ from -kafka.topic %q", ErrInvalidConfig, c.Topic)
	}
	if c.ConsumerGroup == "" {
		return fmt.Errorf("%w: -kafka.consumer-group must not be empty", ErrInvalidConfig)
	}
	switch c.ConsumeFromPosition {
	case PositionLastOffset, PositionStart, PositionEnd:
	case PositionTimestamp:
		if c.ConsumeFromTimestamp <= 0 {
			return fmt.Errorf("%w: -kafka.consume-from-timestamp must be set (milliseconds since the epoch) with -kafka.consume-from-position=timestamp", ErrInvalidConfig)
		}
	default:
		return fmt.Errorf("%w: -kafka.consume-from-position must be last-offset, start, end or timestamp, got %q", ErrInvalidConfig, c.ConsumeFromPosition)
	}
	if _, err := c.OwnedPartitions(); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(c.PusherAddress); err != nil {
		return fmt.Errorf("%w: -pusher.address %q: %w", ErrInvalidConfig, c.PusherAddress, err)
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{
		{"-kafka.commit-interval", c.CommitInterval},
		{"-consumer.backoff-min", c.BackoffMin},
		{"-consumer.backoff-max", c.BackoffMax},
		{"-pusher.sync-timeout", c.SyncTimeout},
		{"-shutdown-timeout", c.ShutdownTimeout},
		{"-consumer.unreachable-timeout", c.UnreachableTimeout},
		{"-dlq.give-up-after", c.DLQGiveUpAfter},
	} {
		if d.value <= 0 {
			return fmt.Errorf("%w: %s must be positive, got %s", ErrInvalidConfig, d.flag, d.value)
		}
	}
	if c.MaxLagAtStartup < 0 {
		return fmt.Errorf("%w: -kafka.max-consumer-lag-at-startup must not be negative (0 disables it), got %s", ErrInvalidConfig, c.MaxLagAtStartup)
	}
	if c.BackoffMax < c.BackoffMin {
		return fmt.Errorf("%w: -consumer.backoff-max (%s) must not be below -consumer.backoff-min (%s)", ErrInvalidConfig, c.BackoffMax, c.BackoffMin)
	}
	for _, n := range []struct {
		flag  string
		value int
	}{
		{"-kafka.fetch-max-bytes", c.FetchMaxBytes},
		{"-kafka.fetch-max-decompressed-bytes", c.FetchMaxDecompressed},
		{"-consumer.max-inflight-requests", c.MaxInflightRequests},
		{"-consumer.max-inflight-per-tenant", c.MaxInflightPerTenant},
		{"-consumer.retrying-tenant-records", c.RetryingTenantRecords},
		{"-consumer.max-inflight-bytes", c.MaxInflightBytes},
		{"-consumer.max-uncommitted-records", c.MaxUncommitted},
		{"-pusher.max-request-bytes", c.MaxRequestBytes},
		{"-consumer.decode-workers", c.DecodeWorkers},
		{"-pusher.max-message-bytes", c.MaxMessageBytes},
	} {
		if n.value <= 0 {
			return fmt.Errorf("%w: %s must be positive, got %d", ErrInvalidConfig, n.flag, n.value)
		}
	}
	if c.MaxMessageBytes > maxMessageBytes {
		return fmt.Errorf("%w: -pusher.max-message-bytes must be at most %d (4 MiB), got %d: the pusher refuses a message over its -pusher.max-request-bytes plus 4 MiB, and a refused message would break the stream every time it is sent", ErrInvalidConfig, maxMessageBytes, c.MaxMessageBytes)
	}
	if c.MaxMessageRequests < 0 {
		return fmt.Errorf("%w: -pusher.max-message-requests must not be negative (0 uses Push), got %d", ErrInvalidConfig, c.MaxMessageRequests)
	}
	return nil
}

// Brokers returns the parsed -kafka.address.
func (c *Config) Brokers() ([]string, error) {
	var out []string
	for _, a := range strings.Split(c.KafkaAddress, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return nil, fmt.Errorf("%w: -kafka.address: %q is not host:port", ErrInvalidConfig, a)
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: -kafka.address must name at least one broker", ErrInvalidConfig)
	}
	return out, nil
}

// OwnedPartitions returns the partitions this instance reads: the
// -kafka.partitions list when set, else the trailing number of -instance-id.
func (c *Config) OwnedPartitions() ([]int32, error) {
	if strings.TrimSpace(c.Partitions) != "" {
		return parsePartitionList(c.Partitions)
	}
	p, err := PartitionFromInstanceID(c.InstanceID)
	if err != nil {
		return nil, err
	}
	return []int32{p}, nil
}

func parsePartitionList(s string) ([]int32, error) {
	seen := map[int32]bool{}
	var out []int32
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.ParseInt(f, 10, 32)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%w: -kafka.partitions: %q is not a partition number", ErrInvalidConfig, f)
		}
		if !seen[int32(n)] {
			seen[int32(n)] = true
			out = append(out, int32(n))
		}
	}
	return out, nil
}

// PartitionFromInstanceID returns the trailing decimal number of id:
// "consumer-3" and "ferry-consumer-12" name partitions 3 and 12.
func PartitionFromInstanceID(id string) (int32, error) {
	end := len(id)
	start := end
	for start > 0 && id[start-1] >= '0' && id[start-1] <= '9' {
		start--
	}
	if start == end {
		return 0, fmt.Errorf("%w: -instance-id %q does not end in a partition number; name it like consumer-3 or set -kafka.partitions", ErrInvalidConfig, id)
	}
	n, err := strconv.ParseInt(id[start:end], 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%w: -instance-id %q: partition number out of range", ErrInvalidConfig, id)
	}
	return int32(n), nil
}
