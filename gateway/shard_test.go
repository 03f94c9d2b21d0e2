package gateway

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// partitionOf is the partition the gateway's partitioner picks among n
// for a record of tenant on slot (nil: a record without a slot).
func partitionOf(tenant string, slot *int, n int) int {
	r := &kgo.Record{Key: []byte(tenant)}
	if slot != nil {
		r.Context = withSlot(context.Background(), *slot)
	}
	return shardPartitioner{partitions: new(atomic.Int64)}.ForTopic("ingest").Partition(r, n)
}

// kafkaDefault is the partition franz-go's default partitioner, Kafka's
// murmur2 of the key, picks for tenant among n: the gateway's before
// shards.
func kafkaDefault(tenant string, n int) int {
	return kgo.StickyKeyPartitioner(nil).ForTopic("ingest").Partition(&kgo.Record{Key: []byte(tenant)}, n)
}

func tenantName(i int) string { return fmt.Sprintf("tenant-%d", i) }

func TestAShardOfOneIsThePartitionKafkasDefaultPartitionerPicksForTheTenant(t *testing.T) {
	t.Parallel()
	zero := 0
	for _, n := range []int{1, 2, 3, 4, 7, 16, 100} {
		for i := range 200 {
			tenant := tenantName(i)
			want := kafkaDefault(tenant, n)
			if got := partitionOf(tenant, nil, n); got != want {
				t.Fatalf("%s among %d partitions: a record without a slot on %d, Kafka's partitioner picks %d", tenant, n, got, want)
			}
			if got := partitionOf(tenant, &zero, n); got != want {
				t.Fatalf("%s among %d partitions: slot 0 on %d, Kafka's partitioner picks %d", tenant, n, got, want)
			}
		}
	}
}

func TestATenantsShardIsConsecutivePartitionsFromItsOwnPartition(t *testing.T) {
	t.Parallel()
	const n = 16
	for i := range 50 {
		tenant := tenantName(i)
		start := kafkaDefault(tenant, n)
		seen := map[int]bool{}
		for slot := range 4 {
			p := partitionOf(tenant, &slot, n)
			if want := (start + slot) % n; p != want {
				t.Fatalf("%s slot %d on partition %d, want %d", tenant, slot, p, want)
			}
			seen[p] = true
		}
		if len(seen) != 4 {
			t.Fatalf("%s: 4 slots on %d partitions, want 4", tenant, len(seen))
		}
	}
}

func TestTenantsShardsSpreadOverThePartitions(t *testing.T) {
	t.Parallel()
	const n, tenants, size = 32, 2000, 4
	load := make([]int, n)
	for i := range tenants {
		for slot := range size {
			load[partitionOf(tenantName(i), &slot, n)]++
		}
	}
	mean := tenants * size / n
	for p, l := range load {
		if l < mean*7/10 || l > mean*13/10 {
			t.Errorf("partition %d holds %d tenants' slots, mean %d: tenants pile up", p, l, mean)
		}
	}
}

func TestASeriesHashIsPrometheusStableHash(t *testing.T) {
	t.Parallel()
	for _, ls := range [][]prompb.Label{
		nil,
		{{Name: "__name__", Value: "up"}},
		{{Name: "__name__", Value: "up"}, {Name: "instance", Value: "a:9090"}, {Name: "job", Value: "node"}},
		{{Name: "__name__", Value: "big"}, {Name: "v", Value: strings.Repeat("x", 3000)}}, // StableHash's other branch
	} {
		var b labels.ScratchBuilder
		for _, l := range ls {
			b.Add(l.Name, l.Value)
		}
		var d xxhash.Digest
		if got, want := seriesHash(&d, ls), labels.StableHash(b.Labels()); got != want {
			t.Errorf("%v: hash %x, labels.StableHash %x", ls, got, want)
		}
	}
}

// shardFake is a producer that partitions as the gateway's Kafka
// producer does, among n partitions, and keeps each partition's values.
type shardFake struct {
	n  int
	mu sync.Mutex
	on map[int][][]byte
}

func (f *shardFake) produce(ctx context.Context, tenant string, values [][]byte) error {
	return f.produceSlots(ctx, tenant, values, nil)
}

func (f *shardFake) produceSlots(ctx context.Context, tenant string, values [][]byte, slots []int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.on == nil {
		f.on = map[int][][]byte{}
	}
	for k, v := range values {
		var slot *int
		if slots != nil {
			slot = &slots[k]
		}
		p := partitionOf(tenant, slot, f.n)
		f.on[p] = append(f.on[p], bytes.Clone(v))
	}
	return nil
}

func (f *shardFake) partitions(context.Context) (int, error) { return f.n, nil }
func (f *shardFake) ready(context.Context) error             { return nil }
func (f *shardFake) close()                                  {}

// seriesRequest is one sample at ts for each of series i in from..to-1,
// its value i*1000+ts.
func seriesRequest(from, to int, ts int64) *prompb.WriteRequest {
	req := &prompb.WriteRequest{}
	for i := from; i < to; i++ {
		req.Timeseries = append(req.Timeseries, prompb.TimeSeries{
			Labels:  []prompb.Label{{Name: "__name__", Value: "m"}, {Name: "series", Value: fmt.Sprint(i)}},
			Samples: []prompb.Sample{{Value: float64(i*1000) + float64(ts), Timestamp: ts}},
		})
	}
	return req
}

// placement reads back every partition of f: the partitions each series
// was found on, and its samples' timestamps in partition order.
func placement(t *testing.T, f *shardFake) (on map[string]map[int]bool, stamps map[string][]int64) {
	t.Helper()
	on, stamps = map[string]map[int]bool{}, map[string][]int64{}
	for p, values := range f.on {
		for _, v := range values {
			var req prompb.WriteRequest
			if err := req.Unmarshal(v); err != nil {
				t.Fatal(err)
			}
			for _, ts := range req.Timeseries {
				key := ts.Labels[1].Value
				if on[key] == nil {
					on[key] = map[int]bool{}
				}
				on[key][p] = true
				for _, s := range ts.Samples {
					stamps[key] = append(stamps[key], s.Timestamp)
				}
			}
		}
	}
	return on, stamps
}

func TestEverySeriesOfAShardedTenantStaysOnOnePartitionOfItsShardInOrder(t *testing.T) {
	t.Parallel()
	f := &shardFake{n: 8}
	g := newTestGateway(t, f, func(c *Config) {
		c.TenantShardSizes = ShardSizes{"big": 4}
		c.MaxRecordBytes = 1024 // several records per slot, too
	})
	const series, requests = 200, 6
	base := nowMs() - requests
	for r := range requests {
		// Each request a different window of the series, so a series
		// meets different neighbours and samples every time.
		req := seriesRequest(r*10, series-r*5, base+int64(r))
		if w := post(t, g, "/api/v1/push", ctV1, "big", v1Body(t, req)); w.Code != http.StatusNoContent {
			t.Fatalf("request %d: status %d: %s", r, w.Code, w.Body)
		}
	}
	on, stamps := placement(t, f)
	shard := map[int]bool{}
	for slot := range 4 {
		shard[partitionOf("big", &slot, f.n)] = true
	}
	used := map[int]bool{}
	for key, ps := range on {
		if len(ps) != 1 {
			t.Errorf("series %s on %d partitions %v, want one", key, len(ps), ps)
		}
		for p := range ps {
			if !shard[p] {
				t.Errorf("series %s on partition %d, outside the tenant's shard %v", key, p, shard)
			}
			used[p] = true
		}
		for i := 1; i < len(stamps[key]); i++ {
			if stamps[key][i] <= stamps[key][i-1] {
				t.Errorf("series %s: samples out of order in its partition: %v", key, stamps[key])
				break
			}
		}
	}
	if len(on) != series {
		t.Errorf("%d series read back, want %d", len(on), series)
	}
	if len(used) != 4 {
		t.Errorf("the tenant's series on %d partitions, want the 4 of its shard", len(used))
	}
}

func TestAShardWiderThanTheTopicUsesEveryPartition(t *testing.T) {
	t.Parallel()
	f := &shardFake{n: 3}
	g := newTestGateway(t, f, func(c *Config) { c.TenantShardSize = 8 })
	if w := post(t, g, "/api/v1/push", ctV1, "anyone", v1Body(t, seriesRequest(0, 300, nowMs()))); w.Code != http.StatusNoContent {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	on, _ := placement(t, f)
	used := map[int]int{}
	for key, ps := range on {
		if len(ps) != 1 {
			t.Errorf("series %s on %d partitions, want one", key, len(ps))
		}
		for p := range ps {
			used[p]++
		}
	}
	if len(used) != 3 || len(on) != 300 {
		t.Errorf("300 series of a shard of 8 on 3 partitions: %d series on %v", len(on), used)
	}
}

func TestATenantOfShardSizeOneKeepsTheRequestAsSentOnItsPartition(t *testing.T) {
	t.Parallel()
	f := &shardFake{n: 8}
	g := newTestGateway(t, f, func(c *Config) { c.TenantShardSizes = ShardSizes{"big": 4} })
	req := seriesRequest(0, 50, nowMs())
	raw, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if w := post(t, g, "/api/v1/push", ctV1, "small", v1Body(t, req)); w.Code != http.StatusNoContent {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	want := kafkaDefault("small", f.n)
	if len(f.on) != 1 || len(f.on[want]) != 1 || !bytes.Equal(f.on[want][0], raw) {
		t.Errorf("want the request as sent, alone on partition %d; got %d partitions", want, len(f.on))
	}
}

func TestTheShardSizeFlagsTakeTenantPairsAndRefuseBadOnes(t *testing.T) {
	t.Parallel()
	var cfg Config
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	fs.SetOutput(&strings.Builder{})
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"-gateway.tenant-shard-size=2", "-gateway.tenant-shard-sizes=a=4, b=8", "-gateway.tenant-shard-sizes=c=1"}); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for tenant, want := range map[string]int{"a": 4, "b": 8, "c": 1, "other": 2} {
		if got := cfg.shardSize(tenant); got != want {
			t.Errorf("tenant %s: shard size %d, want %d", tenant, got, want)
		}
	}
	if got := cfg.TenantShardSizes.String(); got != "a=4,b=8,c=1" {
		t.Errorf("String() = %q", got)
	}
	for _, bad := range []string{"a", "a=0", "a=x", "=4", "a=5000", "a/b=2"} {
		var s ShardSizes
		if err := s.Set(bad); err == nil {
			t.Errorf("Set(%q) succeeded", bad)
		}
	}
	for _, bad := range []func(*Config){
		func(c *Config) { c.TenantShardSize = 0 },
		func(c *Config) { c.TenantShardSize = maxShardSize + 1 },
		func(c *Config) { c.TenantShardSizes = ShardSizes{"a": 0} },
	} {
		c := testConfig(t, nil)
		bad(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "-gateway.tenant-shard-size") {
			t.Errorf("Validate = %v, want an error naming the shard size flag", err)
		}
	}
}

// kafkaPlacement reads topic back from the cluster at addrs: for each
// series, the partitions its samples at each timestamp were found on.
func kafkaPlacement(t *testing.T, addrs []string, topic string) map[string]map[int64]map[int32]bool {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	want, got := int64(0), int64(0)
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	on := map[string]map[int64]map[int32]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for got < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records", got, want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got++
			var req prompb.WriteRequest
			if err := req.Unmarshal(r.Value); err != nil {
				t.Fatal(err)
			}
			for _, ts := range req.Timeseries {
				key, at := ts.Labels[1].Value, ts.Samples[0].Timestamp
				if on[key] == nil {
					on[key] = map[int64]map[int32]bool{}
				}
				if on[key][at] == nil {
					on[key][at] = map[int32]bool{}
				}
				on[key][at][r.Partition] = true
			}
		})
	}
	return on
}

// only is the one partition of ps, or -1 when there is not exactly one.
func only(ps map[int32]bool) int32 {
	for p := range ps {
		if len(ps) == 1 {
			return p
		}
	}
	return -1
}

func TestAfterPartitionsAreAddedTheSeriesMoveAndEachStaysOnOnePartition(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "ingest"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g, err := New(testConfig(t, func(cfg *Config) {
		cfg.KafkaAddress = strings.Join(c.ListenAddrs(), ",")
		cfg.TenantShardSize = 4
	}), slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	base := nowMs() - 100
	ts := base
	send := func() {
		t.Helper()
		ts++
		if w := post(t, g, "/api/v1/push", ctV1, "big", v1Body(t, seriesRequest(0, 100, ts))); w.Code != http.StatusNoContent {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	send()
	first := ts
	cl := g.producer.(*kafkaProducer).cl
	if _, err := kadm.NewClient(cl).CreatePartitions(context.Background(), 4, "ingest"); err != nil {
		t.Fatal(err)
	}
	cl.ForceMetadataRefresh()
	deadline := time.Now().Add(10 * time.Second)
	for n, _ := g.shards.partitions(context.Background()); n != 8; n, _ = g.shards.partitions(context.Background()) {
		// The count is franz-go's, as of the last record it partitioned.
		if time.Now().After(deadline) {
			t.Fatalf("the gateway still counts %d partitions, want 8", n)
		}
		send()
		time.Sleep(10 * time.Millisecond)
	}
	send()
	on := kafkaPlacement(t, c.ListenAddrs(), "ingest")
	shard := map[int32]bool{}
	for slot := range 4 {
		shard[int32(partitionOf("big", &slot, 8))] = true
	}
	moved := 0
	for key, byTs := range on {
		for at, ps := range byTs {
			if only(ps) < 0 {
				t.Errorf("series %s at %d on partitions %v, want one", key, at-base, ps)
			}
		}
		before, after := only(byTs[first]), only(byTs[ts])
		if !shard[after] {
			t.Errorf("series %s on partition %d after the change, outside the new shard %v", key, after, shard)
		}
		if before != after {
			moved++
		}
	}
	if len(on) != 100 || moved == 0 {
		t.Errorf("%d series, %d moved: want 100, some moved", len(on), moved)
	}
	t.Logf("%d of %d series moved to another partition; the new shard is %v", moved, len(on), shard)
}
