package main

// The shards stage: one tenant's throughput as its shard of partitions
// grows (issue 33). The gateway spreads a tenant's series over a shard of
// partitions, each series always on the same one; this stage replays such
// a tenant's backlog at each shard size through one ferry-consumer per
// partition and one ferry-pusher, so the rows of one run say how far more
// partitions carry one tenant on the same machine.

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/proto/prompb"
)

const stageShards = "shards"

// shardsConfig is the flags of the shards stage.
type shardsConfig struct {
	Sizes           []int
	Series          int
	SeriesPerRecord int
	Records         int
	Backends        []string
	sizes, backends string
}

// maxShardSize bounds -shards.sizes: each partition is a consumer process
// on the harness's machine, and a shard of more than 16 on one machine
// measures the machine, not the shard.
const maxShardSize = 16

func (c *shardsConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.sizes, "shards.sizes", "1,2,4",
		"Shard sizes (partitions of the tenant, one ferry-consumer each) the shards stage replays, comma-separated, each at most "+strconv.Itoa(maxShardSize)+"; the first is the one the others are compared to.")
	fs.IntVar(&c.Series, "shards.series", 4000,
		"Series of the shards stage's one tenant; series s lives on partition s mod size, so it must be a multiple of every size times -shards.series-per-record.")
	fs.IntVar(&c.SeriesPerRecord, "shards.series-per-record", 100, "Series of one sample each per record of the shards stage (the same at every size).")
	fs.IntVar(&c.Records, "shards.records", 100_000,
		"Records of each shard size's backlog (the same at every size; 100,000 records of 100 series are about 0.9 GB of values).")
	fs.StringVar(&c.backends, "shards.backends", "discard,tsdb", "Pusher backends the shards stage replays each size into, comma-separated: discard, tsdb.")
}

func (c *shardsConfig) validate() error {
	if c.Series <= 0 || c.SeriesPerRecord <= 0 || c.Records <= 0 {
		return errors.New("-shards.series, -shards.series-per-record and -shards.records must be positive")
	}
	c.Sizes = nil
	for _, f := range strings.Split(c.sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || n > maxShardSize {
			return fmt.Errorf("-shards.sizes: %q is not a shard size in [1, %d]", f, maxShardSize)
		}
		if c.Series%(n*c.SeriesPerRecord) != 0 {
			return fmt.Errorf("-shards.series %d is not a multiple of shard size %d times -shards.series-per-record %d: the records would differ between sizes",
				c.Series, n, c.SeriesPerRecord)
		}
		c.Sizes = append(c.Sizes, n)
	}
	c.Backends = nil
	for _, f := range strings.Split(c.backends, ",") {
		b := strings.TrimSpace(f)
		if b != "discard" && b != "tsdb" {
			return fmt.Errorf("-shards.backends: %q is neither discard nor tsdb", f)
		}
		c.Backends = append(c.Backends, b)
	}
	if c.Records < c.Series/c.SeriesPerRecord {
		return fmt.Errorf("-shards.records %d is less than one step of every series (%d records)", c.Records, c.Series/c.SeriesPerRecord)
	}
	return nil
}

// shardsResult is one shard size replayed into one backend.
type shardsResult struct {
	Size    int
	Backend string
	Backlog *backlog
	Stage   stageResult
	Err     string
}

// shardTenant is the shards stage's one tenant.
var shardTenant = loadgen.Tenant(0)

// shardRequest is the request of step step carrying series, each series'
// labels and value from internal/loadgen, as the gateway would have cut
// the tenant's request by partition.
func shardRequest(series []int, step int) *prompb.WriteRequest {
	req := &prompb.WriteRequest{Timeseries: make([]prompb.TimeSeries, len(series))}
	ts := sampleStart + int64(step)
	for i, s := range series {
		req.Timeseries[i] = prompb.TimeSeries{
			Labels:  loadgen.SeriesLabels(shardTenant, s),
			Samples: []prompb.Sample{{Value: loadgen.Value(s, step), Timestamp: ts}},
		}
	}
	return req
}

// shardRecords lists, for a shard of size partitions, the records of one
// step: partition p carries the series s with s mod size == p, cut into
// records of perRecord series, so every series stays on one partition and
// its samples reach the TSDB in order, as tenant shards at the gateway
// produce them.
func shardRecords(series, perRecord, size int) (partitions []int32, records [][]int) {
	for p := range size {
		var cur []int
		for s := p; s < series; s += size {
			cur = append(cur, s)
			if len(cur) == perRecord {
				partitions, records = append(partitions, int32(p)), append(records, cur)
				cur = nil
			}
		}
		if len(cur) > 0 {
			partitions, records = append(partitions, int32(p)), append(records, cur)
		}
	}
	return partitions, records
}

// produceShard fills a fresh topic of size partitions with the tenant's
// records, step after step, until it holds records records.
func (e *env) produceShard(ctx context.Context, size int) (*backlog, error) {
	c := e.cfg.Shards
	topic, err := e.createTopic(ctx, fmt.Sprintf("shards-%d", size), size)
	if err != nil {
		return nil, err
	}
	parts, chunks := shardRecords(c.Series, c.SeriesPerRecord, size)
	bl := &backlog{Topic: topic, Shape: Shape{Partitions: size, Tenants: 1, Series: c.SeriesPerRecord}}
	n := 0
	var marshalErr error
	produced, bytes, err := e.produceRecords(ctx, func() *kgo.Record {
		if n >= c.Records {
			return nil
		}
		i := n % len(chunks)
		val, err := shardRequest(chunks[i], n/len(chunks)).Marshal()
		if err != nil {
			marshalErr = err
			return nil
		}
		n++
		return &kgo.Record{Topic: topic, Partition: parts[i], Key: []byte(shardTenant), Value: val}
	})
	if err = errors.Join(err, marshalErr); err != nil {
		return nil, err
	}
	bl.Records, bl.Bytes, bl.Samples = produced, bytes, produced*int64(c.SeriesPerRecord)
	bl.Shape.Records = int(produced)
	return bl, nil
}

// measureShards replays a backlog of each shard size into each backend.
// Each size's topic is deleted once replayed, so the stage holds one
// backlog on the broker's disk at a time.
func (e *env) measureShards(ctx context.Context) []shardsResult {
	c := e.cfg.Shards
	var out []shardsResult
	for _, size := range c.Sizes {
		if ctx.Err() != nil {
			break
		}
		e.logf("shards: producing %d records of %d series over %d partitions", c.Records, c.SeriesPerRecord, size)
		bl, err := e.produceShard(ctx, size)
		if err != nil {
			out = append(out, shardsResult{Size: size, Err: err.Error()})
			continue
		}
		for _, backend := range c.Backends {
			pause(ctx)
			r := shardsResult{Size: size, Backend: backend, Backlog: bl}
			load := strings.Fields(loadAvg())[0]
			r.Stage = e.runPipeline(ctx, bl, fmt.Sprintf("shards-%d-%s", size, backend), pipelineOpts{backend: backend})
			r.Stage.Load = load
			r.Err = r.Stage.Err
			e.logf("shards: %d partitions, pipeline(%s) %s", size, backend, r.Stage.summary())
			out = append(out, r)
		}
		e.deleteTopic(bl.Topic)
	}
	return out
}

// deleteTopic deletes one of the run's topics now (best effort).
func (e *kafkaSide) deleteTopic(topic string) {
	if e.broker.kind == kindFake {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.adm.DeleteTopics(ctx, topic); err == nil {
		e.topics = slices.DeleteFunc(e.topics, func(t string) bool { return t == topic })
	}
}

// shardsRatio is a row's samples/s over that of the base size's row of
// the same backend; NaN when that row is missing or either failed.
func shardsRatio(rs []shardsResult, base int, r shardsResult) float64 {
	for _, b := range rs {
		if b.Backend != r.Backend || b.Size != base {
			continue
		}
		if !b.Stage.ok() || !r.Stage.ok() {
			return math.NaN()
		}
		return r.Stage.samplesPerSec() / b.Stage.samplesPerSec()
	}
	return math.NaN()
}

func (r *report) shards(w writer) {
	if len(r.Shards) == 0 {
		return
	}
	c := r.cfg.Shards
	w("\n### Scale: one tenant over a shard of partitions\n\n")
	w("One tenant of %s series; at shard size k its backlog is a fresh topic of k partitions where partition p carries the series s with s mod k = p (each series on one partition, its samples in order, as the gateway's tenant shards write them), ", fmtNum(float64(c.Series)))
	w("%s records of %d series of one sample each at every size, key = tenant, values from `internal/loadgen`'s labels and values. ", fmtNum(float64(c.Records)), c.SeriesPerRecord)
	w("Replayed by one ferry-consumer per partition (default flags, fresh group) into one fresh ferry-pusher per row, default flags but the backend. ")
	w("× size %d is the row's samples/s over the same backend's at shard size %d, both of this run; CPU per million samples over the steady window (10–90 %% acknowledged), per kind of process, all consumers summed. ", c.Sizes[0], c.Sizes[0])
	w("Every process shares the machine's %d CPUs with the broker and the harness: a ratio below k is this machine's ceiling, not the shard's.\n\n", r.Machine.CPUs)
	w("| shard size | pusher | records/s | samples/s | × size %d | consumer CPU s / M samples | pusher CPU s / M samples | broker CPU s / M samples | consumer peak RSS | pusher peak RSS | time | note |\n", c.Sizes[0])
	w("|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, s := range r.Shards {
		st := s.Stage
		if s.Err != "" || !st.ok() {
			w("| %d | %s | | | | | | | | | | FAILED: %s |\n", s.Size, s.Backend, oneLine(cmp.Or(s.Err, st.Err)))
			continue
		}
		w("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Size, s.Backend,
			fmtNum(st.recordsPerSec()), fmtNum(st.samplesPerSec()), fmtF(shardsRatio(r.Shards, c.Sizes[0], s), 2),
			fmtCPU(st, st.ConsumerCPU), fmtCPU(st, st.PusherCPU), fmtCPU(st, st.BrokerCPU),
			rssCell(st.ConsumerPeakRSS), rssCell(st.PusherPeakRSS), st.Elapsed.Round(10*time.Millisecond), oneLine(st.note()))
	}
}
