// Package gateway is Ferry's front door: an HTTP server that accepts
// Prometheus remote-write requests (1.0, and 2.0 converted to 1.0), checks
// them as the consumer and pusher will, and produces each one to Kafka as
// records of exactly the format ferry-consumer reads (key = tenant, value =
// an uncompressed remote-write 1.0 WriteRequest). A request is answered 2xx
// only after Kafka acknowledged every one of its records.
package gateway

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/kafkaclient"
	"github.com/ferrylabs/ferry/internal/tenant"
	"github.com/ferrylabs/ferry/limits"
)

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("invalid configuration")

// maxRecordBytesLimit bounds -gateway.max-record-bytes far above any
// broker's message limit.
const maxRecordBytesLimit = 256 << 20

// Config is the gateway's configuration.
type Config struct {
	KafkaAddress     string
	Topic            string
	TenantHeader     string
	DefaultTenant    string
	MaxRequestBytes  int
	MaxRecordBytes   int
	ProduceTimeout   time.Duration
	TenantRateLimit  float64
	TenantBurst      int
	MaxInflightBytes int64
	ReadTimeout      time.Duration
	WriteTimeout     time.Duration
	// ExemplarsStored says that what the gateway produces reaches a store
	// that keeps exemplars. Remote write 2.0 answers say how many
	// exemplars were written, and the pusher's default TSDB keeps none
	// (-storage.max-exemplars=0): without it they say 0, never more than
	// will be stored.
	ExemplarsStored bool
	// TenantShardSize is how many partitions a tenant's series spread
	// over (shard.go); 1, the default, keeps each tenant on the one
	// partition Kafka's partitioner picks for its key.
	TenantShardSize int
	// TenantShardSizes are tenants' own shard sizes, over TenantShardSize.
	TenantShardSizes ShardSizes
	// Kafka is TLS and SASL to the brokers (-kafka.tls-*, -kafka.sasl-*),
	// the same flags as every Kafka client of Ferry.
	Kafka kafkaclient.Config
	// Limits are the pusher's storage-free checks, applied here so that a
	// series the pusher would refuse is refused to the client instead.
	Limits limits.Limits
	// OTLP is the translation of OTLP metrics (-gateway.otlp.*).
	OTLP OTLPConfig

	// ClientOpts are extra franz-go options, set by code rather than flags:
	// the all-in-one dev mode passes its in-process cluster through them,
	// tests their fault injection. They are applied after the gateway's own.
	ClientOpts []kgo.Opt
}

// RegisterFlags registers the gateway's flags on f.
func (c *Config) RegisterFlags(f *flag.FlagSet) {
	f.StringVar(&c.KafkaAddress, "kafka.address", "localhost:9092", "Kafka bootstrap brokers, comma-separated host:port.")
	f.StringVar(&c.Topic, "kafka.topic", "ingest", "Topic the records are produced to. It must exist: the gateway never creates topics.")
	c.Kafka.RegisterFlags(f)
	f.StringVar(&c.TenantHeader, "gateway.tenant-header", "X-Scope-OrgID", "HTTP header that names the tenant of a request.")
	f.StringVar(&c.DefaultTenant, "gateway.default-tenant", "", "Tenant of requests without the tenant header, for single-tenant setups. Empty answers such requests 401.")
	f.IntVar(&c.MaxRequestBytes, "gateway.max-request-bytes", 10<<20, "Largest request body, in bytes, both compressed and decompressed; larger requests are answered 413.")
	f.IntVar(&c.MaxRecordBytes, "gateway.max-record-bytes", 900_000, "Largest record value, in bytes: a larger request is split by series into several records. Keep it under the topic's max.message.bytes (Kafka's default is 1 MB).")
	f.DurationVar(&c.ProduceTimeout, "gateway.produce-timeout", 10*time.Second, "How long a request waits for Kafka to acknowledge its records before it is answered 503.")
	f.Float64Var(&c.TenantRateLimit, "gateway.tenant-rate-limit", 0, "Samples (floats, histograms and exemplars) per second a tenant may send; over it requests are answered 429 with Retry-After. 0 disables the limit.")
	f.IntVar(&c.TenantBurst, "gateway.tenant-burst", 200_000, "Samples a tenant may send at once above -gateway.tenant-rate-limit; a request with more samples than this is answered 413.")
	f.Int64Var(&c.MaxInflightBytes, "gateway.max-inflight-bytes", 256<<20, "Bytes the gateway holds for requests at once: bodies, decompressed bodies and what decoding them may cost (counted before decoding, at most 48 bytes per decompressed byte); beyond it requests are answered 503 with Retry-After at once rather than queued, and a request that alone would take more is answered 413.")
	f.DurationVar(&c.ReadTimeout, "gateway.read-timeout", 30*time.Second, "Longest time a client may take to send a request body.")
	f.DurationVar(&c.WriteTimeout, "gateway.write-timeout", 45*time.Second, "Longest time from the end of a request's headers to the end of its answer; must exceed -gateway.produce-timeout.")
	f.IntVar(&c.TenantShardSize, "gateway.tenant-shard-size", 1, fmt.Sprintf("Partitions each tenant's series spread over (at most %d): consecutive partitions from the one Kafka's partitioner picks for the tenant, a series always on the same one, so its samples stay in order. Above the partition count, all partitions. 1 keeps a tenant on one partition, as before shards existed. Adding partitions moves series: see docs/operations.md.", maxShardSize))
	f.Var(&c.TenantShardSizes, "gateway.tenant-shard-sizes", "Tenants' own shard sizes over -gateway.tenant-shard-size, as tenant=size pairs separated by commas (team-a=4,team-b=8); the flag may be repeated.")
	f.BoolVar(&c.ExemplarsStored, "gateway.exemplars-stored", false, "Count exemplars as written in remote-write 2.0 answers (X-Prometheus-Remote-Write-Exemplars-Written). Set it when the pusher stores them (-storage.max-exemplars above 0, or a remote-write backend that does); by default the answer says 0, since the default TSDB drops every exemplar.")
	c.Limits.RegisterFlags(f)
	c.OTLP.RegisterFlags(f)
}

// Validate reports the first invalid setting, naming its flag.
func (c *Config) Validate() error {
	switch {
	case c.Kafka.Validate() != nil:
		return c.Kafka.Validate()
	case strings.TrimSpace(c.KafkaAddress) == "":
		return fmt.Errorf("%w: -kafka.address is empty", ErrInvalidConfig)
	case c.Topic == "":
		return fmt.Errorf("%w: -kafka.topic is empty", ErrInvalidConfig)
	case !validHeaderName(c.TenantHeader):
		return fmt.Errorf("%w: -gateway.tenant-header %q is not an HTTP header name", ErrInvalidConfig, c.TenantHeader)
	case c.MaxRequestBytes <= 0:
		return fmt.Errorf("%w: -gateway.max-request-bytes must be positive, got %d", ErrInvalidConfig, c.MaxRequestBytes)
	case c.MaxRecordBytes < 1024 || c.MaxRecordBytes > maxRecordBytesLimit:
		return fmt.Errorf("%w: -gateway.max-record-bytes must be between 1024 and %d, got %d", ErrInvalidConfig, maxRecordBytesLimit, c.MaxRecordBytes)
	case c.ProduceTimeout <= 0:
		return fmt.Errorf("%w: -gateway.produce-timeout must be positive, got %s", ErrInvalidConfig, c.ProduceTimeout)
	case c.TenantRateLimit < 0:
		return fmt.Errorf("%w: -gateway.tenant-rate-limit must not be negative, got %g", ErrInvalidConfig, c.TenantRateLimit)
	case c.TenantBurst <= 0:
		return fmt.Errorf("%w: -gateway.tenant-burst must be positive, got %d", ErrInvalidConfig, c.TenantBurst)
	case c.TenantShardSize < 1 || c.TenantShardSize > maxShardSize:
		return fmt.Errorf("%w: -gateway.tenant-shard-size must be between 1 and %d, got %d", ErrInvalidConfig, maxShardSize, c.TenantShardSize)
	case c.MaxInflightBytes < int64(c.MaxRequestBytes):
		return fmt.Errorf("%w: -gateway.max-inflight-bytes (%d) must be at least -gateway.max-request-bytes (%d)", ErrInvalidConfig, c.MaxInflightBytes, c.MaxRequestBytes)
	case c.ReadTimeout <= 0:
		return fmt.Errorf("%w: -gateway.read-timeout must be positive, got %s", ErrInvalidConfig, c.ReadTimeout)
	case c.WriteTimeout <= c.ProduceTimeout:
		return fmt.Errorf("%w: -gateway.write-timeout (%s) must exceed -gateway.produce-timeout (%s)", ErrInvalidConfig, c.WriteTimeout, c.ProduceTimeout)
	}
	if c.DefaultTenant != "" {
		if err := tenant.Validate(c.DefaultTenant); err != nil {
			return fmt.Errorf("%w: -gateway.default-tenant: %w", ErrInvalidConfig, err)
		}
	}
	for name, n := range c.TenantShardSizes {
		if err := tenant.Validate(name); err != nil || n < 1 || n > maxShardSize {
			return fmt.Errorf("%w: -gateway.tenant-shard-sizes: tenant %q with shard size %d: want a valid tenant and a size between 1 and %d", ErrInvalidConfig, name, n, maxShardSize)
		}
	}
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return c.OTLP.Validate()
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}
