package integration

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/gateway"
	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// The sharded tenant's data: shardSeries series, each with shardSteps
// samples shardStepMs apart, sample k of series i valued i*1000+k.
const (
	shardSeries = 300
	shardSteps  = 5
	shardStepMs = 15_000
)

// shardRequest is step k of every series of metric, in an order of its
// own, so that a series meets other neighbours in every request.
func shardRequest(metric string, series int, k int, baseMs int64, rng *rand.Rand) *prompb.WriteRequest {
	req := &prompb.WriteRequest{}
	for _, i := range rng.Perm(series) {
		req.Timeseries = append(req.Timeseries, prompb.TimeSeries{
			Labels:  []prompb.Label{{Name: "__name__", Value: metric}, {Name: "series", Value: strconv.Itoa(i)}},
			Samples: []prompb.Sample{{Value: float64(i*1000 + k), Timestamp: baseMs + int64(k)*shardStepMs}},
		})
	}
	return req
}

// pushTo sends req to the gateway at addr as tenant and wants 204.
func pushTo(t *testing.T, ctx context.Context, addr, tenant string, req *prompb.WriteRequest) {
	t.Helper()
	raw, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/api/v1/push", bytes.NewReader(snappy.Encode(nil, raw)))
	if err != nil {
		t.Fatal(err)
	}
	hreq.Header.Set("Content-Type", "application/x-protobuf")
	hreq.Header.Set("Content-Encoding", "snappy")
	hreq.Header.Set("X-Scope-OrgID", tenant)
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("tenant %s: status %d", tenant, resp.StatusCode)
	}
}

// seriesPlacement is what Kafka holds of one tenant's series: the
// partitions each was found on, and its samples' timestamps in the order
// of their partition's offsets.
type seriesPlacement struct {
	partitions map[string]map[int32]bool
	stamps     map[string][]int64
}

// readPlacement reads topic from the start to the end offsets ends.
func readPlacement(t *testing.T, ctx context.Context, b *kafkatest.Broker, topic string, ends map[int32]int64) map[string]*seriesPlacement {
	t.Helper()
	cl := b.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	out := map[string]*seriesPlacement{}
	next := map[int32]int64{}
	done := func() bool {
		for p, end := range ends {
			if next[p] < end {
				return false
			}
		}
		return true
	}
	pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for !done() {
		fs := cl.PollFetches(pctx)
		if err := pctx.Err(); err != nil {
			t.Fatalf("read up to %v: at %v: %v", ends, next, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			next[r.Partition] = r.Offset + 1
			var req prompb.WriteRequest
			if err := req.Unmarshal(r.Value); err != nil {
				t.Fatalf("partition %d offset %d: %v", r.Partition, r.Offset, err)
			}
			sp := out[string(r.Key)]
			if sp == nil {
				sp = &seriesPlacement{partitions: map[string]map[int32]bool{}, stamps: map[string][]int64{}}
				out[string(r.Key)] = sp
			}
			for _, ts := range req.Timeseries {
				key := ts.Labels[1].Value
				if sp.partitions[key] == nil {
					sp.partitions[key] = map[int32]bool{}
				}
				sp.partitions[key][r.Partition] = true
				for _, s := range ts.Samples {
					sp.stamps[key] = append(sp.stamps[key], s.Timestamp)
				}
			}
		})
	}
	return out
}

func TestATenantOfShardSizeFourSpreadsItsSeriesOverFourPartitionsEachSeriesOnOneInOrder(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	p := pipeline{broker: b, topic: b.CreateTopic(t, 4)}
	p.pusher = startPusher(t, pusherConfig(t, t.TempDir()))
	startConsumers(t, b, p.topic, p.topic+"-group", p.pusher.GRPCAddr(), 4)
	cfg := gatewayConfig(t, p, "127.0.0.1:0")
	cfg.Gateway.TenantShardSizes = gateway.ShardSizes{"sharded": 4}
	cfg.Gateway.MaxRecordBytes = 4096 // several records per partition and request
	g := startGateway(t, cfg)
	ctx := t.Context()

	base := recentStart()
	rng := rand.New(rand.NewPCG(1, 2))
	for k := range shardSteps {
		pushTo(t, ctx, g.HTTPAddr(), "sharded", shardRequest("sharded_metric", shardSeries, k, base, rng))
		pushTo(t, ctx, g.HTTPAddr(), "single", shardRequest("single_metric", 20, k, base, rng))
	}

	placed := readPlacement(t, ctx, b, p.topic, b.EndOffsets(t, p.topic))
	used := map[int32]int{}
	sharded := placed["sharded"]
	if sharded == nil || len(sharded.partitions) != shardSeries {
		t.Fatalf("Kafka holds %v series of the sharded tenant, want %d", sharded, shardSeries)
	}
	for key, ps := range sharded.partitions {
		if len(ps) != 1 {
			t.Errorf("series %s on %d partitions %v, want exactly one", key, len(ps), ps)
		}
		for p := range ps {
			used[p]++
		}
		if st := sharded.stamps[key]; len(st) != shardSteps || !increasing(st) {
			t.Errorf("series %s: samples in its partition at %v, want %d in timestamp order", key, st, shardSteps)
		}
	}
	if len(used) != 4 {
		t.Errorf("the sharded tenant's series on partitions %v, want all 4", used)
	}
	t.Logf("series of the sharded tenant by partition: %v", used)
	want := kafkaPartition([]byte("single"), 4)
	for key, ps := range placed["single"].partitions {
		if len(ps) != 1 || !ps[want] {
			t.Errorf("series %s of the tenant of shard size 1 on %v, want only its Kafka partition %d", key, ps, want)
		}
	}

	waitCommittedToEnd(t, b, p.topic+"-group", p.topic, 60*time.Second)
	at := base + (shardSteps-1)*shardStepMs
	checkPerSeries(t, p.pusher.HTTPAddr(), "sharded", "count_over_time(sharded_metric[10m])", at, func(int) float64 { return shardSteps })
	checkPerSeries(t, p.pusher.HTTPAddr(), "sharded", "sum_over_time(sharded_metric[10m])", at, func(i int) float64 {
		return float64(shardSteps*i*1000 + shardSteps*(shardSteps-1)/2)
	})
}

func increasing(st []int64) bool {
	for i := 1; i < len(st); i++ {
		if st[i] <= st[i-1] {
			return false
		}
	}
	return true
}

// checkPerSeries runs q, a vector of one value per series of the shard
// test's metric, and wants want(i) for series i and every series there.
func checkPerSeries(t *testing.T, httpAddr, tenant, q string, atMs int64, want func(i int) float64) {
	t.Helper()
	code, r := query(t, httpAddr, tenant, q, atMs)
	if code != http.StatusOK || r.Status != "success" {
		t.Fatalf("%s: HTTP %d (%s: %s)", q, code, r.ErrorType, r.Error)
	}
	if len(r.Data.Result) != shardSeries {
		t.Errorf("%s: %d series, want %d", q, len(r.Data.Result), shardSeries)
	}
	for _, s := range r.Data.Result {
		i, err := strconv.Atoi(s.Metric["series"])
		if err != nil {
			t.Fatalf("%s: series label %q", q, s.Metric["series"])
		}
		if got := fmt.Sprint(s.Value[1]); got != strconv.FormatFloat(want(i), 'f', -1, 64) {
			t.Errorf("%s: series %d is %s, want %g", q, i, got, want(i))
		}
	}
}
