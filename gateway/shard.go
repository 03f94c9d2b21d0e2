package gateway

// Tenant shards: how a tenant's series spread over the topic's partitions.
//
// A tenant's shard is the width = min(shard size, partitions) consecutive
// partitions that start at the one Kafka's own partitioner picks for the
// tenant key, (murmur2(tenant) & 0x7fffffff) % partitions: the start
// spreads tenants as keyed records always did, and a shard of one is
// exactly the partition a tenant had before shards existed. A series goes
// to slot seriesHash % width of its tenant's shard, so all its samples
// land on one partition, in the order the gateway produced them. The
// record's key stays the tenant: consumers and the dead-letter topic see
// nothing new.
//
// The gateway groups a request's series by slot (which needs the width,
// and so the partition count, when the shard size is above one) and the
// partitioner adds the slot to the tenant's start with the partition
// count franz-go produces with. When partitions are added both move:
// tenants and their series land on other partitions (docs/operations.md,
// "Adding partitions safely").

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/tenant"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// maxShardSize bounds -gateway.tenant-shard-size and its overrides: far
// above the partitions one tenant could use, and it bounds the slot
// arrays a request allocates (width is at most the partition count too).
const maxShardSize = 4096

// ShardSizes is -gateway.tenant-shard-sizes: a tenant's own shard size,
// over -gateway.tenant-shard-size. The gateway has no per-tenant settings
// file (its limits are flags for every tenant), so the overrides are a
// flag too: tenant=size pairs, comma-separated, the flag repeatable.
type ShardSizes map[string]int

// String implements flag.Value: the pairs sorted by tenant.
func (s ShardSizes) String() string {
	pairs := make([]string, 0, len(s))
	for t, n := range s {
		pairs = append(pairs, t+"="+strconv.Itoa(n))
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

// Set implements flag.Value: it adds the pairs of one flag occurrence.
func (s *ShardSizes) Set(v string) error {
	if *s == nil {
		*s = ShardSizes{}
	}
	for pair := range strings.SplitSeq(v, ",") {
		name, size, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			return fmt.Errorf("%q is not tenant=size", pair)
		}
		if err := tenant.Validate(name); err != nil {
			return fmt.Errorf("tenant %q: %w", name, err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(size))
		if err != nil || n < 1 || n > maxShardSize {
			return fmt.Errorf("tenant %q: shard size %q is not a number between 1 and %d", name, size, maxShardSize)
		}
		(*s)[name] = n
	}
	return nil
}

// shardSize is tenant's shard size: its override, or the default.
func (c *Config) shardSize(tenant string) int {
	if n, ok := c.TenantShardSizes[tenant]; ok {
		return n
	}
	return c.TenantShardSize
}

// sep separates label names and values in seriesHash, as in Prometheus's
// labels.StableHash: 0xff is never part of valid UTF-8.
var sep = []byte{0xff}

// seriesHash is the hash of a series' labels that picks its slot: xxhash
// of each name and value followed by 0xff, in the order sent (sorted, as
// the label checks require of anything produced). It equals Prometheus's
// labels.StableHash, whose promise is never to change: two gateway
// versions in a rolling upgrade must put a series on the same partition.
// d is reset and reused, so hashing allocates nothing.
func seriesHash(d *xxhash.Digest, ls []prompb.Label) uint64 {
	d.Reset()
	for _, l := range ls {
		_, _ = d.WriteString(l.Name)
		_, _ = d.Write(sep)
		_, _ = d.WriteString(l.Value)
		_, _ = d.Write(sep)
	}
	return d.Sum64()
}

// slotKey is the context key of a record's slot in its tenant's shard.
type slotKey struct{}

// withSlot returns ctx carrying slot, for Record.Context: franz-go hands
// the record, context and all, to the partitioner.
func withSlot(ctx context.Context, slot int) context.Context {
	return context.WithValue(ctx, slotKey{}, slot)
}

// slotOf is the slot r carries, 0 (its tenant's start) when none.
func slotOf(r *kgo.Record) int {
	if r.Context == nil {
		return 0
	}
	slot, _ := r.Context.Value(slotKey{}).(int)
	return slot
}

// shardPartitioner is the gateway's kgo.Partitioner: a record goes to
// slot partitions after the one Kafka's default partitioner picks for its
// key. Without a slot it is Kafka's choice, unchanged. It also keeps the
// partition count franz-go last produced with, which is the gateway's
// view of the topic's size.
type shardPartitioner struct {
	partitions *atomic.Int64
}

// ForTopic implements kgo.Partitioner.
func (p shardPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return shardTopicPartitioner{
		key:        kgo.StickyKeyPartitioner(nil).ForTopic(topic),
		partitions: p.partitions,
	}
}

// shardTopicPartitioner is shardPartitioner for one topic. franz-go calls
// it under the topic's lock, one record at a time.
type shardTopicPartitioner struct {
	key        kgo.TopicPartitioner
	partitions *atomic.Int64
}

// RequiresConsistency implements kgo.TopicPartitioner: a series must stay
// on its partition even while that partition has no leader (its records
// wait and fail rather than go elsewhere), as keyed records always did.
func (shardTopicPartitioner) RequiresConsistency(*kgo.Record) bool { return true }

// Partition implements kgo.TopicPartitioner.
func (p shardTopicPartitioner) Partition(r *kgo.Record, n int) int {
	p.partitions.Store(int64(n))
	return (p.key.Partition(r, n) + slotOf(r)) % n
}

// slotOrder groups req's series by slot among width: it returns, in
// s.order, the series' indexes slot by slot (each slot's series in the
// order sent) and, in s.slots, the slot of each series by index.
func (s *scratch) slotOrder(req *prompb.WriteRequest, width int) {
	slots := slices.Grow(s.slots[:0], len(req.Timeseries))
	counts := make([]int, width+1)
	for i := range req.Timeseries {
		slot := int(seriesHash(&s.digest, req.Timeseries[i].Labels) % uint64(width)) //nolint:gosec // width is positive
		slots = append(slots, slot)
		counts[slot+1]++
	}
	for j := 1; j <= width; j++ {
		counts[j] += counts[j-1] // counts[j] is now where slot j starts
	}
	order := slices.Grow(s.order[:0], len(slots))[:len(slots)]
	for i, slot := range slots {
		order[counts[slot]] = i
		counts[slot]++
	}
	s.slots, s.order = slots, order
}
