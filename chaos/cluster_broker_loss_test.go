package chaos

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/kafkatest"
)

// TestClusterBrokerLossUnderRemoteWriteLoad runs the whole pipeline on a
// three-broker cluster (replication factor 3, min.insync.replicas=2):
// remote-write clients send to ferry-gateway, four ferry-consumers push to
// a ferry-pusher with the TSDB backend. Under that load the broker leading
// most partitions is SIGKILLed; with it still down a second broker is
// stopped, which leaves one replica, below min.insync.replicas, so Kafka
// takes no write; then both come back. It proves that
//   - the gateway never answers 2xx while Kafka cannot take a write, and
//     answers 5xx instead;
//   - every sample the gateway answered 2xx for is in Kafka and queryable
//     at the pusher, each series with exactly the acknowledged count (and
//     the values' sum), so none is missing and none counted twice;
//   - the consumers commit every partition to its end;
//   - the gateway and the consumers got through it without a restart.
func TestClusterBrokerLossUnderRemoteWriteLoad(t *testing.T) {
	sc := currentScale()
	cluster := kafkatest.StartCluster(t)
	const partitions, series = 4, 10
	topic := cluster.CreateTopic(t, partitions)
	cluster.WaitInSync(t, topic, time.Minute)
	addrs := "-kafka.address=" + strings.Join(cluster.Addrs(), ",")
	tenants := tenantsByPartition(topic, partitions, sc.clusterClients)

	pu := startPusherProc(t)
	pl := &pipeline{t: t, broker: cluster.Broker, topic: topic, group: "chaos-" + topic, partitions: partitions}
	// The later -kafka.address wins over consumerArgs' first broker: the
	// consumers know every node, as a deployment's would.
	cs := pl.startConsumers(pu.grpcAddr, addrs)
	gw := newProc(t, "gateway", gatewayBinary(t), freeAddr(t), addrs, "-kafka.topic="+topic)
	gw.start()
	gw.waitReady(time.Minute)
	procs := append([]*proc{gw}, cs...)
	mark := func(what string) {
		for _, p := range procs {
			p.mark(what)
		}
	}

	load := newRWLoad(gw.httpAddr, tenants, series, time.Now().Add(-10*time.Minute).UnixMilli())
	ctx, stopLoad := context.WithCancel(context.Background())
	defer stopLoad()
	errs := make(chan error, len(tenants))
	giveUp := time.Now().Add(10 * time.Minute)
	start := time.Now()
	for c := range tenants {
		go func() { errs <- load.run(ctx, c, giveUp) }()
	}
	// How long the load runs steadily before, between and after the
	// faults: long enough for every client to be answered several times.
	steady := max(3*time.Second, sc.clusterOutage/3)
	everyClientProgresses(t, load, "on the whole cluster", steady)

	// 1. SIGKILL the broker leading most partitions. Once the cluster fenced
	// it, its partitions have new leaders and two replicas are enough.
	first, led := cluster.LeadingMost(t, topic)
	mark(fmt.Sprintf("SIGKILL of broker %d", first))
	killAt := time.Now()
	cluster.Kill(t, first)
	waitFor(t, time.Minute, "new leaders for the killed broker's partitions", func() bool {
		for _, l := range cluster.Leaders(t, topic) {
			if l == first || l < 0 {
				return false
			}
		}
		return true
	})
	movedAfter := time.Since(killAt)
	everyClientProgresses(t, load, "with one broker down", steady)

	// 2. With it still down, stop a second broker: one replica is left,
	// fewer than min.insync.replicas, and nothing may be acknowledged.
	second, _ := cluster.LeadingMost(t, topic)
	mark(fmt.Sprintf("stop of broker %d", second))
	stopBegan := time.Now()
	cluster.Stop(t, second)
	stoppedAt := time.Now()
	time.Sleep(sc.clusterOutage)
	outageEnd := time.Now()
	for _, p := range procs {
		if !p.running() {
			t.Fatalf("%s exited (%v) while the cluster refused writes: it must wait", p.name, p.exitState())
		}
	}

	// 3. Both come back, at once.
	mark(fmt.Sprintf("start of brokers %d and %d", second, first))
	cluster.Start(t, second, first)
	restarted := time.Now()
	cluster.WaitInSync(t, topic, 2*time.Minute)
	backAt := time.Now()
	t.Logf("broker %d stopped in %s; brokers %d and %d restarted in %s, all replicas in sync %s later",
		second, stoppedAt.Sub(stopBegan).Round(100*time.Millisecond), second, first,
		restarted.Sub(outageEnd).Round(100*time.Millisecond), backAt.Sub(restarted).Round(100*time.Millisecond))
	everyClientProgresses(t, load, "after both brokers came back", steady)
	stopLoad()
	for range tenants {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	loadFor := time.Since(start)

	// Never 2xx while Kafka could take nothing. A request answered in the
	// first second after the stop may have been taken just before it.
	if bad := load.answeredOK(stoppedAt.Add(time.Second), outageEnd); len(bad) > 0 {
		t.Errorf("the gateway answered %d requests 2xx while one broker of three was left (min.insync.replicas=2), first: client %d request %d at +%s",
			len(bad), bad[0].client, bad[0].seq, bad[0].at.Sub(stoppedAt).Round(time.Millisecond))
	}
	counts := load.statusCounts()
	if counts["5xx"] == 0 {
		t.Errorf("no request was answered 5xx during a %s outage (answers %v): the outage did not reach the gateway", sc.clusterOutage, counts)
	}
	if counts["4xx"] != 0 {
		t.Errorf("%d requests answered 4xx", counts["4xx"])
	}

	committed := pl.waitCommittedToEnd(3 * time.Minute)
	for _, p := range procs {
		if !p.running() || p.runs() != 1 {
			t.Errorf("%s: running=%v after %d starts (%v): it must get through broker loss without a restart", p.name, p.running(), p.runs(), p.exitState())
		}
	}

	acked := load.ackedCounts()
	inKafka, dupRecords := checkKafka(t, cluster, topic, pl.ends(), acked, series)
	found, lostReqs := checkTSDB(t, pu.httpAddr, tenants, acked, series, load.baseMs)

	var ackedReqs int64
	for _, a := range acked {
		ackedReqs += int64(a)
	}
	t.Logf("broker %d (led %d of %d partitions) killed at +%s, its partitions moved in %s; broker %d stopped for %s; both back and in sync at +%s",
		first, led, partitions, killAt.Sub(start).Round(time.Second), movedAfter.Round(100*time.Millisecond),
		second, outageEnd.Sub(stoppedAt).Round(100*time.Millisecond), backAt.Sub(start).Round(time.Second))
	t.Logf("answers %v; acknowledged requests by client %v; committed %s", counts, acked, formatOffsets(committed))
	report(t, outcome{
		name: "cluster-broker-loss", produced: ackedReqs, delivered: ackedReqs - lostReqs, lost: lostReqs,
		duplicates: dupRecords, brokerRestarts: 2,
		extra: fmt.Sprintf("requests_2xx=%d requests_5xx=%d requests_unanswered=%d samples_acked=%d samples_in_kafka=%d samples_found=%d broker_kills=1 broker_stops=1 outage=%s seconds=%.0f",
			counts["2xx"], counts["5xx"], counts["none"], ackedReqs*series, inKafka, found, sc.clusterOutage, loadFor.Seconds()),
	})
}

// tenantsByPartition returns n tenant names, tenant i on partition
// i % partitions under the gateway's partitioner (Kafka's murmur2 of the
// key), so every consumer has work.
func tenantsByPartition(topic string, partitions, n int) []string {
	part := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
	var out []string
	for k := 0; len(out) < n; k++ {
		name := "cluster-tenant-" + strconv.Itoa(k)
		if part.Partition(&kgo.Record{Key: []byte(name)}, partitions) == len(out)%partitions {
			out = append(out, name)
		}
	}
	return out
}

// everyClientProgresses waits until every client had three more requests
// acknowledged, then lets the load run for steady: each tenant's partition
// takes writes, wherever its leader moved.
func everyClientProgresses(t *testing.T, load *rwLoad, when string, steady time.Duration) {
	t.Helper()
	before := load.ackedCounts()
	waitFor(t, time.Minute, "three more acknowledged requests of every client "+when, func() bool {
		for c, n := range load.ackedCounts() {
			if n < before[c]+3 {
				return false
			}
		}
		return true
	})
	time.Sleep(steady)
}

// checkKafka reads the topic back and checks that every acknowledged
// sample is in it. It returns the distinct samples found and how many
// samples were written more than once (retries of requests that Kafka took
// but the gateway could not confirm in time).
func checkKafka(t *testing.T, cluster *kafkatest.Cluster, topic string, ends map[int32]int64, acked []int, series int) (distinct, dups int64) {
	t.Helper()
	cl := cluster.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	got, err := kafkaSamples(ctx, cl, topic, ends, len(acked), series)
	if err != nil {
		t.Fatal(err)
	}
	for c, n := range acked {
		for s := range series {
			missing := 0
			for seq := range n {
				if got[c][s][seq] == 0 {
					missing++
				}
			}
			if missing > 0 {
				t.Errorf("client %d series %d: %d of %d acknowledged samples are not in Kafka", c, s, missing, n)
			}
			for seq, k := range got[c][s] {
				distinct++
				dups += int64(k - 1)
				if seq >= n {
					t.Errorf("client %d series %d: sample %d is in Kafka but was never sent acknowledged", c, s, seq)
				}
			}
		}
	}
	return distinct, dups
}

// checkTSDB checks through the pusher's query API that each series of each
// client holds exactly its acknowledged samples: the count (the TSDB keeps
// one sample per timestamp, so a duplicate cannot inflate it; a sample
// stored beyond the acknowledged ones would) and the sum of the values
// 0..n-1. It returns the samples found and the acknowledged requests with
// a sample missing.
func checkTSDB(t *testing.T, pusherHTTP string, tenants []string, acked []int, series int, baseMs int64) (found, lostReqs int64) {
	t.Helper()
	longest := 0
	for _, n := range acked {
		longest = max(longest, n)
	}
	at := time.UnixMilli(baseMs + int64(longest) + 1000)
	rng := strconv.Itoa(longest+2000) + "ms"
	for c, tenant := range tenants {
		sel := fmt.Sprintf(`%s{client="%d"}[%s]`, rwMetric, c, rng)
		counts, err := queryVector(pusherHTTP, tenant, "count_over_time("+sel+")", "series", at)
		if err != nil {
			t.Fatal(err)
		}
		sums, err := queryVector(pusherHTTP, tenant, "sum_over_time("+sel+")", "series", at)
		if err != nil {
			t.Fatal(err)
		}
		n := acked[c]
		wantSum := float64(n) * float64(n-1) / 2
		worst := 0
		for s := range series {
			key := strconv.Itoa(s)
			got := int(counts[key])
			found += int64(got)
			if got != n || sums[key] != wantSum {
				t.Errorf("tenant %s client %d series %d: %d samples with sum %.0f stored, want the %d acknowledged with sum %.0f",
					tenant, c, s, got, sums[key], n, wantSum)
			}
			worst = max(worst, n-got)
		}
		lostReqs += int64(worst)
	}
	return found, lostReqs
}
