package consumer

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/loadgen"
)

// These tests inject broker faults, which only kfake can do; they run on
// kfake whatever broker the package uses.

func TestFetchErrorsOnOnePartitionDoNotStopTheOthers(t *testing.T) {
	t.Parallel()
	// Two brokers, one partition each: partition 0's fetches go to its
	// leader alone, so they can fail while partition 1's succeed within
	// the same consumer.
	cluster, topic := kafkatest.NewFake(t, 2, kfake.NumBrokers(2))
	for p := range int32(2) {
		if err := cluster.MoveTopicPartition(topic, p, p); err != nil {
			t.Fatalf("move partition %d: %v", p, err)
		}
	}
	var failing atomic.Bool
	var injected atomic.Int64
	failing.Store(true)
	cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if !failing.Load() || cluster.CurrentNode() != 0 {
			return nil, nil, false
		}
		injected.Add(1)
		return failFetch(req.(*kmsg.FetchRequest)), nil, true
	})

	addrs := cluster.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce(t, cl, topic, 1, 2, 0, 20) // tenant-0 → partition 0

	rec := newRecorder()
	addr := startPusher(t, rec.backend())
	began := time.Now()
	c := startConsumer(t, testConfig(addrs, topic, "0,1", addr))
	// Partition 1's records come once partition 0 is failing: produced
	// before, they could all be pushed before partition 0's first fetch,
	// and show nothing.
	waitFor(t, 30*time.Second, "partition 0's fetches failing", func() bool { return injected.Load() > 0 })
	tenant1 := loadgen.Tenant(1)
	var recs []*kgo.Record
	for step := range 20 {
		recs = append(recs, &kgo.Record{Topic: topic, Partition: 1, Key: []byte(tenant1), Value: testShape.Marshal(tenant1, step)})
	}
	produceRecords(t, cl, recs...)
	waitFor(t, 30*time.Second, "partition 1's records pushed while partition 0 fails", func() bool {
		return len(rec.snapshot()[tenant1]) == 20
	})
	if got := rec.snapshot()["tenant-0"]; len(got) != 0 || injected.Load() == 0 {
		t.Fatalf("partition 0 delivered %d records with %d injected fetch errors; want 0 and > 0", len(got), injected.Load())
	}
	failing.Store(false)
	failed := time.Since(began)
	waitFor(t, 30*time.Second, "partition 0's records pushed after the fault", func() bool {
		return rec.total() == 40
	})
	checkSteps(t, rec.snapshot(), 2, 20, nil)
	// The failing partition is paused between attempts with backoff (10ms
	// doubling to 200ms in tests, at least half of that with the jitter),
	// not fetched in a hot loop: about 10 attempts a second at most once
	// the backoff is at its bound. The bound allows twice that, for as
	// long as the fault lasted: on a loaded machine that is more than the
	// usual second or two.
	if n, most := injected.Load(), 100+int64(20*failed.Seconds()); n > most {
		t.Errorf("%d fetch errors injected in %s of failing, want at most %d: the failing partition is fetched in a hot loop", n, failed.Round(time.Millisecond), most)
	}
	t.Logf("injected %d fetch errors on partition 0; partition 1 flowed meanwhile", injected.Load())
	c.stop(t)
}

// failFetch answers a fetch with UNKNOWN_SERVER_ERROR, which the client
// does not retry internally, for every partition asked for.
func failFetch(req *kmsg.FetchRequest) *kmsg.FetchResponse {
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	resp.SetVersion(req.GetVersion())
	resp.SessionID = req.SessionID
	for _, rt := range req.Topics {
		st := kmsg.NewFetchResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewFetchResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.ErrorCode = kerr.UnknownServerError.Code
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

func TestCommitErrorsAreRetriedOnTheNextTick(t *testing.T) {
	t.Parallel()
	cluster, topic := kafkatest.NewFake(t, 1)
	var failures atomic.Int64
	cluster.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if failures.Add(1) > 3 {
			return nil, nil, false // from the fourth commit on: the real handler, for good
		}
		cluster.KeepControl()
		return failCommit(req.(*kmsg.OffsetCommitRequest)), nil, true
	})
	addrs := cluster.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce(t, cl, topic, 1, 1, 0, 10)

	rec := newRecorder()
	addr := startPusher(t, rec.backend())
	cfg := testConfig(addrs, topic, "0", addr)
	c := startConsumer(t, cfg)
	waitFor(t, 30*time.Second, "the commit to succeed after three injected failures", func() bool {
		return c.Stats().Committed[0] == 10
	})
	if n := failures.Load(); n < 4 {
		t.Fatalf("%d commit attempts, want at least 4 (3 failed, then one that worked)", n)
	}
	if n := testutil.ToFloat64(c.metrics.commits.WithLabelValues("commit_failed")); n != 3 {
		t.Fatalf("ferry_consumer_commits_total{result=\"commit_failed\"} = %v, want 3", n)
	}
	c.stop(t)
}

// failCommit refuses every partition of a commit.
// The topic ID must be copied: the client matches the answer by it.
func failCommit(req *kmsg.OffsetCommitRequest) *kmsg.OffsetCommitResponse {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	resp.SetVersion(req.GetVersion())
	for _, rt := range req.Topics {
		st := kmsg.NewOffsetCommitResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetCommitResponseTopicPartition()
			sp.Partition = rp.Partition
			// Not retriable, so the client hands it to the committer
			// instead of retrying it internally.
			sp.ErrorCode = kerr.GroupAuthorizationFailed.Code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
