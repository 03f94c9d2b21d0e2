package consumer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ferrylabs/ferry/internal/kafkatest"
)

// refetchLog is a topic filled with records whose values are all distinct,
// and those values by partition and offset.
type refetchLog struct {
	broker *kafkatest.Broker
	topic  string
	values map[int32]map[int64][]byte
}

// newRefetchLog creates a topic of partitions partitions and writes perPartition
// records of random values (1 to 400 bytes, so batches hold varying counts)
// to each. The producer's small batches let a small fetch size stop a read
// early, as a real topic written by many producers would.
func newRefetchLog(t testing.TB, partitions int32, perPartition int) *refetchLog {
	t.Helper()
	b := kafkatest.Current(t)
	l := &refetchLog{broker: b, topic: b.CreateTopic(t, partitions), values: map[int32]map[int64][]byte{}}
	cl := b.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(16<<10))
	rng := rand.New(rand.NewPCG(uint64(partitions), uint64(perPartition)))
	var recs []*kgo.Record
	for i := range perPartition {
		for p := range partitions {
			value := make([]byte, 1+rng.IntN(400))
			for j := range value {
				value[j] = byte(rng.Uint32())
			}
			recs = append(recs, &kgo.Record{Topic: l.topic, Partition: p, Key: fmt.Appendf(nil, "tenant-%d", i%7), Value: value})
		}
	}
	produceRecords(t, cl, recs...)
	for _, r := range recs { // ProduceSync filled in the offsets
		if l.values[r.Partition] == nil {
			l.values[r.Partition] = map[int64][]byte{}
		}
		l.values[r.Partition][r.Offset] = r.Value
	}
	return l
}

// config returns a consumer configuration for the log's topic.
func (l *refetchLog) config() Config {
	return testConfig(l.broker.Addrs(), l.topic, "0", "127.0.0.1:1")
}

// scattered picks about n offsets spread over [from, to), with uneven gaps.
func scattered(rng *rand.Rand, from, to int64, n int) []int64 {
	var out []int64
	step := max(1, (to-from)/int64(n))
	for o := from + rng.Int64N(step); o < to; o += 1 + rng.Int64N(2*step) {
		out = append(out, o)
	}
	return out
}

// newTestRefetcher returns a refetcher closed when the test ends.
func newTestRefetcher(t testing.TB, cfg Config) *refetcher {
	t.Helper()
	r, err := newRefetcher(cfg, testLogger(t))
	if err != nil {
		t.Fatalf("new refetcher: %v", err)
	}
	t.Cleanup(r.close)
	return r
}

// mustRead reads and fails the test on an error.
func mustRead(t testing.TB, r *refetcher, p int32, offsets []int64) (map[int64][]byte, []int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	values, missing, err := r.read(ctx, p, offsets)
	if err != nil {
		t.Fatalf("read partition %d: %v", p, err)
	}
	return values, missing
}

// checkFound checks that values holds exactly the log's values at offsets.
func (l *refetchLog) checkFound(t testing.TB, p int32, offsets []int64, values map[int64][]byte) {
	t.Helper()
	if len(values) != len(offsets) {
		t.Errorf("partition %d: got %d values, want %d (one per offset asked for, nothing else)", p, len(values), len(offsets))
	}
	for _, o := range offsets {
		got, ok := values[o]
		if !ok {
			t.Errorf("partition %d: no value for offset %d", p, o)
			continue
		}
		if !bytes.Equal(got, l.values[p][o]) {
			t.Errorf("partition %d offset %d: got %d bytes %x..., want %d bytes %x...", p, o, len(got), got[:min(8, len(got))], len(l.values[p][o]), l.values[p][o][:8])
		}
	}
}

func TestRefetchScatteredOffsets(t *testing.T) {
	t.Parallel()
	const perPartition = 4000
	l := newRefetchLog(t, 3, perPartition)
	for _, tc := range []struct {
		name       string
		fetchBytes int
	}{
		{"should return the values of scattered offsets with the default fetch size", 4 << 20},
		{"should return the values of scattered offsets across many small fetches", 8 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := l.config()
			cfg.FetchMaxBytes = tc.fetchBytes
			r := newTestRefetcher(t, cfg)
			rng := rand.New(rand.NewPCG(1, uint64(tc.fetchBytes)))
			for p := range int32(3) {
				// The first and last offsets of the partition are the
				// edges a range computation gets wrong.
				offsets := append([]int64{0}, scattered(rng, 1, perPartition-1, 300)...)
				offsets = append(offsets, perPartition-1)
				values, missing := mustRead(t, r, p, offsets)
				if len(missing) > 0 {
					t.Errorf("partition %d: missing %v, want none", p, missing)
				}
				l.checkFound(t, p, offsets, values)
			}
		})
	}
}

func TestRefetchReadsOnlyTheRange(t *testing.T) {
	t.Parallel()
	l := newRefetchLog(t, 1, 4000)
	cfg := l.config()
	cfg.FetchMaxBytes = 8 << 10
	r := newTestRefetcher(t, cfg)
	var read atomic.Int64
	r.opts = append(r.opts, kgo.WithHooks(batchCounter{&read}))

	offsets := []int64{2000, 2003, 2050}
	values, _ := mustRead(t, r, 0, offsets)
	l.checkFound(t, 0, offsets, values)
	// Each fetch is 4 KiB, about 20 records of ~200 bytes; kgo may read
	// one fetch ahead, and a fetch returns whole batches (up to 16 KiB
	// here). Reading from the partition start would be 2000 records.
	if n := read.Load(); n > 500 {
		t.Errorf("read %d records for offsets 2000-2050: the read did not start at the first offset or did not stop after the last", n)
	}
}

// batchCounter counts the records of the batches a client reads.
type batchCounter struct{ n *atomic.Int64 }

func (c batchCounter) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	c.n.Add(int64(m.NumRecords))
}

func TestRefetchConcurrentReads(t *testing.T) {
	t.Parallel()
	const perPartition = 2000
	l := newRefetchLog(t, 3, perPartition)
	r := newTestRefetcher(t, l.config())
	// Reads run one at a time, so that re-reading holds one fetch at once.
	clients := &clientCounter{}
	r.opts = append(r.opts, kgo.WithHooks(clients))
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 4 {
				// Same and different partitions, overlapping ranges.
				p := int32(rng.IntN(3))
				from := rng.Int64N(perPartition / 2)
				offsets := scattered(rng, from, from+perPartition/2, 50)
				values, missing := mustRead(t, r, p, offsets)
				if len(missing) > 0 {
					t.Errorf("partition %d: missing %v, want none", p, missing)
				}
				l.checkFound(t, p, offsets, values)
			}
		})
	}
	wg.Wait()
	if n := clients.most.Load(); n != 1 {
		t.Errorf("%d clients were open at once, want 1: reads must run one at a time", n)
	}
}

// clientCounter tracks the most kgo clients open at once.
type clientCounter struct{ open, most atomic.Int64 }

func (c *clientCounter) OnNewClient(*kgo.Client) {
	n := c.open.Add(1)
	for {
		m := c.most.Load()
		if n <= m || c.most.CompareAndSwap(m, n) {
			return
		}
	}
}

func (c *clientCounter) OnClientClosed(*kgo.Client) { c.open.Add(-1) }

func TestRefetchMissingPastTheEnd(t *testing.T) {
	t.Parallel()
	l := newRefetchLog(t, 1, 100)
	r := newTestRefetcher(t, l.config())
	// A read must not wait for records past the end: that would take
	// the whole stall timeout and end in an error. A stall far above
	// what a read takes on a loaded machine keeps the two apart.
	r.stall = 30 * time.Second
	for _, tc := range []struct {
		name        string
		offsets     []int64
		wantFound   []int64
		wantMissing []int64
	}{
		{"should report offsets at and past the end as missing", []int64{97, 99, 100, 110}, []int64{97, 99}, []int64{100, 110}},
		{"should report a read wholly past the end as missing", []int64{100, 101, 5000}, nil, []int64{100, 101, 5000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			began := time.Now()
			values, missing := mustRead(t, r, 0, tc.offsets)
			if !slices.Equal(missing, tc.wantMissing) {
				t.Errorf("missing = %v, want %v", missing, tc.wantMissing)
			}
			l.checkFound(t, 0, tc.wantFound, values)
			if took := time.Since(began); took > r.stall/3 {
				t.Errorf("read took %s: it waited for records past the end", took)
			}
		})
	}
}

func TestRefetchMissingDeletedRecords(t *testing.T) {
	t.Parallel()
	l := newRefetchLog(t, 2, 1000)
	adm := l.broker.Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var del kadm.Offsets
	del.AddOffset(l.topic, 0, 600, -1)
	resp, err := adm.DeleteRecords(ctx, del)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("delete records below 600: %v", err)
	}
	r := newTestRefetcher(t, l.config())
	for _, tc := range []struct {
		name        string
		partition   int32
		offsets     []int64
		wantFound   []int64
		wantMissing []int64
	}{
		{"should report offsets below the log start as missing", 0, []int64{10, 599, 600, 601, 900}, []int64{600, 601, 900}, []int64{10, 599}},
		{"should report a read wholly below the log start as missing", 0, []int64{0, 1, 300}, nil, []int64{0, 1, 300}},
		{"should read the partition that kept its records", 1, []int64{0, 1, 300, 999}, []int64{0, 1, 300, 999}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values, missing := mustRead(t, r, tc.partition, tc.offsets)
			if !slices.Equal(missing, tc.wantMissing) {
				t.Errorf("missing = %v, want %v", missing, tc.wantMissing)
			}
			l.checkFound(t, tc.partition, tc.wantFound, values)
		})
	}
}

func TestRefetchTransactionMarkersAreMissing(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	txn := b.Client(t, kgo.TransactionalID("refetch-"+topic), kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	values := map[int64][]byte{}
	for i := range 3 { // three transactions of two records, each followed by its commit marker
		if err := txn.BeginTransaction(); err != nil {
			t.Fatalf("begin transaction: %v", err)
		}
		for j := range 2 {
			rec := &kgo.Record{Value: fmt.Appendf(nil, "txn %d record %d", i, j)}
			if err := txn.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
			values[rec.Offset] = rec.Value
		}
		if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	// Records at 0,1 3,4 6,7; markers at 2, 5 and 8, the last offset.
	var found, markers []int64
	for o := range int64(9) {
		if _, ok := values[o]; ok {
			found = append(found, o)
		} else {
			markers = append(markers, o)
		}
	}
	if !slices.Equal(markers, []int64{2, 5, 8}) {
		t.Fatalf("records at %v: the markers are not where this test expects them", found)
	}
	r := newTestRefetcher(t, testConfig(b.Addrs(), topic, "0", "127.0.0.1:1"))
	r.stall = 5 * time.Second
	got, missing := mustRead(t, r, 0, []int64{1, 2, 3, 7, 8})
	if !slices.Equal(missing, []int64{2, 8}) {
		t.Errorf("missing = %v, want the marker offsets [2 8]", missing)
	}
	for _, o := range []int64{1, 3, 7} {
		if !bytes.Equal(got[o], values[o]) {
			t.Errorf("offset %d: got %q, want %q", o, got[o], values[o])
		}
	}
	if len(got) != 3 {
		t.Errorf("got values for %d offsets, want 3", len(got))
	}
}

// silentBroker accepts connections and never answers: a broker that hangs.
func silentBroker(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// stuckFetches returns a configuration for a private kfake cluster holding
// ten records, whose fetches never get an answer while its other requests
// (metadata, list offsets) do: a broker that hangs in the middle of a read.
// The channel is closed once the first fetch is held.
func stuckFetches(t testing.TB) (Config, <-chan struct{}) {
	t.Helper()
	c, topic := kafkatest.NewFake(t, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 10 {
		produceRecords(t, cl, &kgo.Record{Value: fmt.Appendf(nil, "%d", i)})
	}
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // before the cluster closes
	fetching := make(chan struct{})
	var once sync.Once
	c.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		once.Do(func() { close(fetching) })
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	return testConfig(c.ListenAddrs(), topic, "0", "127.0.0.1:1"), fetching
}

// waitReading waits until a read of r holds the read slot: it is past
// waiting for another read, and contacting Kafka.
func waitReading(t testing.TB, r *refetcher) {
	t.Helper()
	waitFor(t, 10*time.Second, "a read to take the slot", func() bool { return len(r.slot) == 1 })
}

// awaitAfter is await for a read cut short at the time cut: it returns the
// outcome and how long after cut the read returned.
func awaitAfter(t testing.TB, c <-chan readOutcome, cut time.Time) (readOutcome, time.Duration) {
	t.Helper()
	o := await(t, c)
	return o, time.Since(cut)
}

// closedPort returns an address nothing listens on.
func closedPort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// readAsync starts a read and returns its error and duration on a channel.
func readAsync(ctx context.Context, r *refetcher, offsets []int64) <-chan readOutcome {
	out := make(chan readOutcome, 1)
	go func() {
		began := time.Now()
		_, _, err := r.read(ctx, 0, offsets)
		out <- readOutcome{err, time.Since(began)}
	}()
	return out
}

type readOutcome struct {
	err  error
	took time.Duration
}

// await returns the outcome of a read, failing the test if it hangs.
func await(t testing.TB, c <-chan readOutcome) readOutcome {
	t.Helper()
	select {
	case o := <-c:
		return o
	case <-time.After(10 * time.Second):
		t.Fatal("read did not return within 10s")
		return readOutcome{}
	}
}

func TestRefetchContextCancellation(t *testing.T) {
	t.Parallel()
	cfg := testConfig([]string{silentBroker(t)}, "refetch", "0", "127.0.0.1:1")

	t.Run("should return at once when the context is already done", func(t *testing.T) {
		r := newTestRefetcher(t, cfg)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		o := await(t, readAsync(ctx, r, []int64{1}))
		if !errors.Is(o.err, context.Canceled) || o.took > time.Second {
			t.Errorf("got %v after %s, want context.Canceled at once", o.err, o.took)
		}
	})
	t.Run("should return promptly when the context ends during a read", func(t *testing.T) {
		r := newTestRefetcher(t, cfg)
		ctx, cancel := context.WithCancel(context.Background())
		res := readAsync(ctx, r, []int64{1})
		waitReading(t, r)
		cancel()
		o, after := awaitAfter(t, res, time.Now())
		if !errors.Is(o.err, context.Canceled) || after > 2*time.Second {
			t.Errorf("got %v %s after the cancel, want context.Canceled promptly", o.err, after)
		}
	})
	t.Run("should return promptly when the context ends while fetching", func(t *testing.T) {
		cfg, fetching := stuckFetches(t)
		r := newTestRefetcher(t, cfg)
		ctx, cancel := context.WithCancel(context.Background())
		res := readAsync(ctx, r, []int64{1, 5})
		select {
		case <-fetching:
		case <-time.After(30 * time.Second):
			t.Fatal("no fetch within 30s")
		}
		cancel()
		o, after := awaitAfter(t, res, time.Now())
		if !errors.Is(o.err, context.Canceled) || after > 2*time.Second {
			t.Errorf("got %v %s after the cancel, want context.Canceled promptly", o.err, after)
		}
	})
	t.Run("should return promptly when the context ends while waiting for another read", func(t *testing.T) {
		r := newTestRefetcher(t, cfg)
		holder, stopHolder := context.WithCancel(context.Background())
		defer stopHolder()
		first := readAsync(holder, r, []int64{1})
		waitReading(t, r)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		o := await(t, readAsync(ctx, r, []int64{2}))
		if !errors.Is(o.err, context.DeadlineExceeded) || o.took > 2*time.Second {
			t.Errorf("waiting read: got %v after %s, want context.DeadlineExceeded within 2s", o.err, o.took)
		}
		stopHolder()
		await(t, first)
	})
}

func TestRefetchUnreachableBroker(t *testing.T) {
	t.Parallel()
	t.Run("should fail within the deadline when nothing listens", func(t *testing.T) {
		r := newTestRefetcher(t, testConfig([]string{closedPort(t)}, "refetch", "0", "127.0.0.1:1"))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		o := await(t, readAsync(ctx, r, []int64{1, 2}))
		if o.err == nil || o.took > 2*time.Second {
			t.Errorf("got %v after %s, want an error within the 1s deadline", o.err, o.took)
		}
	})
	t.Run("should fail within the deadline when the broker never answers", func(t *testing.T) {
		r := newTestRefetcher(t, testConfig([]string{silentBroker(t)}, "refetch", "0", "127.0.0.1:1"))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		o := await(t, readAsync(ctx, r, []int64{1, 2}))
		if !errors.Is(o.err, context.DeadlineExceeded) || o.took > 2*time.Second {
			t.Errorf("got %v after %s, want context.DeadlineExceeded within 2s", o.err, o.took)
		}
	})
	t.Run("should fail after the stall timeout when fetches get no answer", func(t *testing.T) {
		cfg, _ := stuckFetches(t)
		r := newTestRefetcher(t, cfg)
		r.stall = 300 * time.Millisecond
		o := await(t, readAsync(context.Background(), r, []int64{1, 5}))
		if !errors.Is(o.err, errKafkaSilent) || o.took > 2*time.Second {
			t.Errorf("got %v after %s, want errKafkaSilent after about 300ms", o.err, o.took)
		}
	})
	t.Run("should fail after the stall timeout when the context has no deadline", func(t *testing.T) {
		r := newTestRefetcher(t, testConfig([]string{silentBroker(t)}, "refetch", "0", "127.0.0.1:1"))
		r.stall = 300 * time.Millisecond
		o := await(t, readAsync(context.Background(), r, []int64{1, 2}))
		if !errors.Is(o.err, errKafkaSilent) || o.took > 2*time.Second {
			t.Errorf("got %v after %s, want errKafkaSilent after about 300ms", o.err, o.took)
		}
	})
}

func TestRefetchClose(t *testing.T) {
	t.Parallel()
	r := newTestRefetcher(t, testConfig([]string{silentBroker(t)}, "refetch", "0", "127.0.0.1:1"))
	res := readAsync(context.Background(), r, []int64{1})
	waitReading(t, r)
	closed := make(chan struct{})
	go func() { r.close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("close did not return within 5s of a read against a silent broker")
	}
	if o := await(t, res); !errors.Is(o.err, errRefetcherClosed) {
		t.Errorf("running read: got %v, want errRefetcherClosed", o.err)
	}
	if o := await(t, readAsync(context.Background(), r, []int64{1})); !errors.Is(o.err, errRefetcherClosed) {
		t.Errorf("read after close: got %v, want errRefetcherClosed", o.err)
	}
	r.close() // a second close must not block
}

func TestRefetchErrorNamesTheRead(t *testing.T) {
	t.Parallel()
	r := newTestRefetcher(t, testConfig([]string{closedPort(t)}, "refetch", "0", "127.0.0.1:1"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := r.read(ctx, 4, []int64{30, 10, 20})
	if want := "re-read partition 4 offsets 10-30: context canceled"; err == nil || err.Error() != want {
		t.Errorf("got %v, want %q", err, want)
	}
}

func TestRefetchOffsetScan(t *testing.T) {
	t.Parallel()
	data := func(offsets ...int64) []*kgo.Record {
		var out []*kgo.Record
		for _, o := range offsets {
			out = append(out, &kgo.Record{Offset: o, Value: fmt.Appendf(nil, "v%d", o)})
		}
		return out
	}
	marker := func(o int64) *kgo.Record {
		return &kgo.Record{Offset: o, Attrs: kgo.NewRecordAttrs(kgo.RecordAttrsOpts{Control: true, Transactional: true})}
	}
	for _, tc := range []struct {
		name        string
		want        []int64
		end         int64
		fetches     [][]*kgo.Record
		wantFound   []int64
		wantMissing []int64
		wantErr     error
	}{
		{
			name: "should keep the offsets asked for and skip the others", want: []int64{3, 5}, end: 10,
			fetches:   [][]*kgo.Record{data(3, 4), data(5, 6)},
			wantFound: []int64{3, 5},
		},
		{
			name: "should report offsets before the first record as missing", want: []int64{1, 2, 7}, end: 10,
			fetches:   [][]*kgo.Record{data(5, 6, 7)},
			wantFound: []int64{7}, wantMissing: []int64{1, 2},
		},
		{
			name: "should report offsets in a gap as missing", want: []int64{2, 3, 4, 6}, end: 10,
			fetches:   [][]*kgo.Record{data(2), data(5, 6)},
			wantFound: []int64{2, 6}, wantMissing: []int64{3, 4},
		},
		{
			name: "should report a marker's offset and those before it as missing", want: []int64{2, 3}, end: 10,
			fetches:     [][]*kgo.Record{{marker(3)}},
			wantMissing: []int64{2, 3},
		},
		{
			name: "should report offsets at or past the end as missing", want: []int64{8, 9, 10, 12}, end: 10,
			fetches:   [][]*kgo.Record{data(8, 9)},
			wantFound: []int64{8, 9}, wantMissing: []int64{10, 12},
		},
		{
			name: "should fail on a record before the first offset read", want: []int64{5}, end: 10,
			fetches: [][]*kgo.Record{data(0)},
			wantErr: errLogTruncated,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newOffsetScan(tc.want)
			s.end(tc.end)
			var err error
			for _, f := range tc.fetches {
				if err = s.feed(f); err != nil {
					break
				}
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("feed: got %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if !s.done() {
				t.Errorf("not done after the records")
			}
			values, missing := s.result()
			if !slices.Equal(missing, tc.wantMissing) {
				t.Errorf("missing = %v, want %v", missing, tc.wantMissing)
			}
			if len(values) != len(tc.wantFound) {
				t.Errorf("got %d values, want %d", len(values), len(tc.wantFound))
			}
			for _, o := range tc.wantFound {
				if got := string(values[o]); got != fmt.Sprintf("v%d", o) {
					t.Errorf("offset %d: got %q", o, got)
				}
			}
		})
	}
}

func TestRefetchNormalizeOffsets(t *testing.T) {
	t.Parallel()
	in := []int64{5, 1, 5, 3}
	if got := normalizeOffsets(in); !slices.Equal(got, []int64{1, 3, 5}) {
		t.Errorf("got %v, want [1 3 5]", got)
	}
	if !slices.Equal(in, []int64{5, 1, 5, 3}) {
		t.Errorf("the caller's slice changed: %v", in)
	}
}

// BenchmarkRefetchRead re-reads 300 offsets spread over 20000 records, the
// typical read; BenchmarkRefetchReadOne one record, which is mostly the cost
// of a client per read (connection, metadata, end offset).
func BenchmarkRefetchRead(b *testing.B) {
	l := newRefetchLog(b, 1, 20000)
	r := newTestRefetcher(b, l.config())
	offsets := scattered(rand.New(rand.NewPCG(1, 2)), 0, 20000, 300)
	for b.Loop() {
		mustRead(b, r, 0, offsets)
	}
}

func BenchmarkRefetchReadOne(b *testing.B) {
	l := newRefetchLog(b, 1, 100)
	r := newTestRefetcher(b, l.config())
	for b.Loop() {
		mustRead(b, r, 0, []int64{50})
	}
}

func TestRefetchOffsetScanCopiesValues(t *testing.T) {
	t.Parallel()
	// kgo's record values are slices of the fetched batch: a value kept
	// as is would keep the whole batch, other tenants' records included,
	// in memory until the lane pushes it.
	batch := []byte("aaaabbbbcccc")
	s := newOffsetScan([]int64{1})
	s.end(10)
	if err := s.feed([]*kgo.Record{{Offset: 1, Value: batch[0:4]}, {Offset: 2, Value: batch[4:8]}}); err != nil {
		t.Fatal(err)
	}
	copy(batch, "xxxxxxxxxxxx")
	values, _ := s.result()
	if got := string(values[1]); got != "aaaa" {
		t.Errorf("value of offset 1 = %q after the batch changed, want %q: the value shares the batch's memory", got, "aaaa")
	}
}
