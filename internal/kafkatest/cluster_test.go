package kafkatest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/kafkatest"
)

// TestAClusterTakesWritesWithOneNodeDownAndRefusesThemWithTwo proves what
// the cluster chaos tests rely on: topics have three replicas, a write
// needs two of them in sync, a SIGKILLed node's partitions move to the
// others, and a stopped node comes back with its data.
func TestAClusterTakesWritesWithOneNodeDownAndRefusesThemWithTwo(t *testing.T) {
	c := kafkatest.StartCluster(t)
	if got := len(c.Addrs()); got != kafkatest.ClusterSize {
		t.Fatalf("Addrs() = %v, want %d addresses", c.Addrs(), kafkatest.ClusterSize)
	}
	topic := c.CreateTopic(t, 3)
	c.WaitInSync(t, topic, time.Minute)
	cl := c.Client(t, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	// probe gives up after a few tries and so reports Kafka's own error
	// where cl would retry until its context ends. Without idempotence it
	// needs no producer ID, which a broker without a controller quorum
	// could not hand out.
	probe := c.Client(t, kgo.DefaultProduceTopic(topic), kgo.DisableIdempotentWrite(),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordRetries(5))
	if err := probe.ProduceSync(context.Background(), &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatalf("probe write to the whole cluster: %v", err)
	}
	write := func(n int, timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		rs := make([]*kgo.Record, n)
		for i := range rs {
			rs[i] = &kgo.Record{Value: []byte("v")}
		}
		return cl.ProduceSync(ctx, rs...).FirstErr()
	}
	if err := write(30, 30*time.Second); err != nil {
		t.Fatalf("writing to the whole cluster: %v", err)
	}

	first, led := c.LeadingMost(t, topic)
	t.Logf("node %d leads %d of 3 partitions; killing it", first, led)
	c.Kill(t, first)
	if err := write(30, time.Minute); err != nil {
		t.Fatalf("writing with node %d killed: %v", first, err)
	}
	for p, l := range c.Leaders(t, topic) {
		if l == first {
			t.Errorf("partition %d still led by the killed node %d", p, l)
		}
	}

	second := first%kafkatest.ClusterSize + 1
	c.Stop(t, second)
	pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := probe.ProduceSync(pctx, &kgo.Record{Value: []byte("v")}).FirstErr()
	cancel()
	if err == nil {
		t.Fatal("a write with one of three replicas left was acknowledged; min.insync.replicas=2 must refuse it")
	}
	if !errors.Is(err, kerr.NotEnoughReplicas) && !errors.Is(err, kerr.NotEnoughReplicasAfterAppend) {
		t.Errorf("write with one replica left: %v, want NOT_ENOUGH_REPLICAS", err)
	}
	t.Logf("with nodes %d and %d down a write is refused: %v", first, second, err)

	c.Start(t, second, first)
	c.WaitInSync(t, topic, 2*time.Minute)
	if err := write(30, time.Minute); err != nil {
		t.Fatalf("writing after both nodes came back: %v", err)
	}
	var total int64
	for _, end := range c.EndOffsets(t, topic) {
		total += end
	}
	// 91 acknowledged; the refused one may have been appended before the
	// in-sync replicas shrank (NOT_ENOUGH_REPLICAS_AFTER_APPEND) and kept.
	if total < 91 || total > 92 {
		t.Errorf("the topic holds %d records, want 91 (at most 92)", total)
	}
}
