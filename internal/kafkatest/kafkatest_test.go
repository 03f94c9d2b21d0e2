package kafkatest_test

import (
	"context"
	"errors"
	"maps"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferrylabs/ferry/internal/kafkatest"
)

// These tests check the helper itself, on whichever broker Main chose: run
// them once per kind (real, FERRY_KAFKA_FAKE=1, FERRY_KAFKA_ADDRESS=...).

func TestMain(m *testing.M) { kafkatest.Main(m) }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// produce writes n[p] records to each partition p of topic and waits for the
// acks.
func produce(t *testing.T, cl *kgo.Client, topic string, n map[int32]int) {
	t.Helper()
	var rs []*kgo.Record
	for p, count := range n {
		for i := range count {
			rs = append(rs, &kgo.Record{Topic: topic, Partition: p, Key: []byte("tenant"), Value: []byte{byte(i)}})
		}
	}
	if err := cl.ProduceSync(ctx(t), rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

func TestBrokerDescribesItself(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	if len(b.Addrs()) == 0 {
		t.Fatal("no addresses")
	}
	switch b.Kind() {
	case kafkatest.KindFake:
		if b.Fake() == nil {
			t.Error("kfake broker without a Fake() cluster")
		}
	case kafkatest.KindReal:
		if !strings.HasPrefix(b.Version(), "4.") {
			t.Errorf("real broker version = %q, want 4.x", b.Version())
		}
		if b.Fake() != nil || b.LogPath() == "" {
			t.Errorf("real broker: Fake() = %v, LogPath() = %q", b.Fake(), b.LogPath())
		}
	case kafkatest.KindExternal:
		if b.Fake() != nil {
			t.Error("external broker with a Fake() cluster")
		}
	default:
		t.Fatalf("unknown kind %q", b.Kind())
	}
	t.Logf("kind %s at %v", b.Kind(), b.Addrs())
}

func TestCreateTopicIsUniqueAndVisible(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	var names []string
	t.Run("sub/test.with odd:chars", func(t *testing.T) {
		for range 2 {
			names = append(names, b.CreateTopic(t, 3))
		}
	})
	if names[0] == names[1] {
		t.Fatalf("two topics of one test share the name %q", names[0])
	}
	valid := regexp.MustCompile(`^TestCreateTopicIsUniqueAndVisible-sub-test-with_odd-chars-[0-9a-f]{8}$`)
	for _, n := range names {
		if !valid.MatchString(n) {
			t.Errorf("topic name %q is not the sanitized test name plus a suffix", n)
		}
	}
	// The subtest has ended, so its cleanup deleted both topics. Kafka deletes
	// asynchronously: give the metadata a moment to catch up.
	adm := b.Admin(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		md, err := adm.ListTopics(ctx(t), names...)
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, n := range names {
			if md.Has(n) {
				left = append(left, n)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("topics %v still exist 10s after their test ended", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestEndOffsets(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 3)

	if got, want := b.EndOffsets(t, topic), map[int32]int64{0: 0, 1: 0, 2: 0}; !maps.Equal(got, want) {
		t.Fatalf("new topic: EndOffsets = %v, want %v", got, want)
	}
	cl := b.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce(t, cl, topic, map[int32]int{0: 1, 1: 2, 2: 5})
	if got, want := b.EndOffsets(t, topic), map[int32]int64{0: 1, 1: 2, 2: 5}; !maps.Equal(got, want) {
		t.Fatalf("after producing: EndOffsets = %v, want %v", got, want)
	}
}

func TestCommittedOffsets(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 3)
	group := "group-" + topic
	produce(t, b.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner())), topic, map[int32]int{0: 3, 1: 3, 2: 3})

	if got := b.CommittedOffsets(t, group, topic); len(got) != 0 {
		t.Fatalf("before any commit: CommittedOffsets = %v, want empty", got)
	}

	// Commit without joining the group, as the Ferry consumer does; partition
	// 1 gets no commit and must be absent from the result.
	var os kadm.Offsets
	os.AddOffset(topic, 0, 2, -1)
	os.AddOffset(topic, 2, 3, -1)
	resp, err := b.Admin(t).CommitOffsets(ctx(t), group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("CommitOffsets: %v", err)
	}
	if got, want := b.CommittedOffsets(t, group, topic), map[int32]int64{0: 2, 2: 3}; !maps.Equal(got, want) {
		t.Fatalf("CommittedOffsets = %v, want %v", got, want)
	}
	// Another topic of the same group is not mixed in.
	if got := b.CommittedOffsets(t, group, topic+"-other"); len(got) != 0 {
		t.Fatalf("CommittedOffsets of an uncommitted topic = %v, want empty", got)
	}
}

func TestCommittedOffsetsOfAbsentGroup(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	got := b.CommittedOffsets(t, "no-such-group-"+topic, topic)
	if got == nil || len(got) != 0 {
		t.Fatalf("CommittedOffsets of an absent group = %#v, want an empty map", got)
	}
}

// TestStopStartKeepsData runs only on a real broker started by kafkatest; it is
// not parallel because Stop takes the package's broker away from every test.
func TestStopStartKeepsData(t *testing.T) {
	b := kafkatest.Current(t)
	if b.Kind() != kafkatest.KindReal {
		// Stop would skip too; this says why before creating a topic.
		t.Skipf("needs a real broker started by kafkatest, have %s", b.Kind())
	}
	topic := b.CreateTopic(t, 2)
	group := "group-" + topic
	cl := b.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce(t, cl, topic, map[int32]int{0: 4, 1: 1})
	var os kadm.Offsets
	os.AddOffset(topic, 0, 4, -1)
	if err := b.Admin(t).CommitAllOffsets(ctx(t), group, os); err != nil {
		t.Fatalf("commit: %v", err)
	}

	b.Stop(t)
	b.Start(t)

	if got, want := b.EndOffsets(t, topic), map[int32]int64{0: 4, 1: 1}; !maps.Equal(got, want) {
		t.Errorf("after restart: EndOffsets = %v, want %v", got, want)
	}
	if got, want := b.CommittedOffsets(t, group, topic), map[int32]int64{0: 4}; !maps.Equal(got, want) {
		t.Errorf("after restart: CommittedOffsets = %v, want %v", got, want)
	}
	// The client made before Stop reconnects by itself.
	produce(t, cl, topic, map[int32]int{1: 1})
	if got := b.EndOffsets(t, topic)[1]; got != 2 {
		t.Errorf("after producing post-restart: partition 1 end offset = %d, want 2", got)
	}
}

// TestNewFakeInjectsFaults shows the fault-injection path: a private kfake
// cluster whose first ListOffsets answer is an error.
func TestNewFakeInjectsFaults(t *testing.T) {
	t.Parallel()
	c, topic := kafkatest.NewFake(t, 2)
	if !strings.HasPrefix(topic, "TestNewFakeInjectsFaults-") {
		t.Errorf("topic %q is not named after the test", topic)
	}

	var calls atomic.Int32
	// Without KeepControl the function is dropped once it has handled a request.
	c.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		calls.Add(1)
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range req.(*kmsg.ListOffsetsRequest).Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code // not retriable: reported, not retried
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})

	adm := kadm.NewClient(newFakeClient(t, c.ListenAddrs()))
	listed, err := adm.ListEndOffsets(ctx(t), topic)
	if err == nil {
		err = listed.Error() // kadm returns auth errors directly, others per partition
	}
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("first ListEndOffsets: error %v, want the injected TOPIC_AUTHORIZATION_FAILED", err)
	}
	if calls.Load() != 1 {
		t.Fatalf("control function ran %d times, want 1", calls.Load())
	}
	listed, err = adm.ListEndOffsets(ctx(t), topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		t.Fatalf("second ListEndOffsets: %v", err)
	}
	if len(listed[topic]) != 2 {
		t.Fatalf("listed %d partitions, want 2", len(listed[topic]))
	}
}

func newFakeClient(t *testing.T, addrs []string) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}
