package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/proto/codec"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/tsdbstore"
)

// dataset is what a test produced with loadgen: steps 0..steps-1 of
// tenants 0..tenants-1.
type dataset struct {
	shape   loadgen.Shape
	tenants int
	steps   int
}

// at is the query time: one step after the last sample.
func (d dataset) at() int64 { return d.shape.StartMs + int64(d.steps)*d.shape.StepMs }

// rangeSelector is a range that reaches from the query time back past the
// first sample.
func (d dataset) rangeSelector() string {
	return fmt.Sprintf("[%ds]", (d.at()-d.shape.StartMs)/1000+60)
}

// wantSum is the sum of series s's values over all steps.
func (d dataset) wantSum(s int) float64 {
	var sum float64
	for n := range d.steps {
		sum += loadgen.Value(s, n)
	}
	return sum
}

// checkQueries asks the query API, for every tenant and series,
// count_over_time and sum_over_time over all the data, and fails unless
// they equal the count and sum of what was produced. It returns every
// answer by query, so that two pushers can be compared.
func checkQueries(t *testing.T, httpAddr string, d dataset) map[string]float64 {
	t.Helper()
	answers := map[string]float64{}
	for i := range d.tenants {
		tenant := loadgen.Tenant(i)
		for s := range d.shape.Series {
			sel := fmt.Sprintf(`ferry_demo_value{series="%d"}%s`, s, d.rangeSelector())
			count := queryValue(t, httpAddr, tenant, "count_over_time("+sel+")", d.at())
			sum := queryValue(t, httpAddr, tenant, "sum_over_time("+sel+")", d.at())
			if count != float64(d.steps) {
				t.Errorf("%s: count_over_time(%s) = %v, want %d", tenant, sel, count, d.steps)
			}
			if want := d.wantSum(s); sum != want {
				t.Errorf("%s: sum_over_time(%s) = %v, want %v", tenant, sel, sum, want)
			}
			answers[tenant+" count "+sel] = count
			answers[tenant+" sum "+sel] = sum
		}
	}
	return answers
}

// TestQueriesMatchWhatWasProduced produces 8 tenants x 200 records x 10
// series through Kafka, consumers and the TSDB-backed pusher, and checks
// that the query API returns exactly the count and the sum of every
// series; that a tenant that never wrote sees nothing; and that a query
// without a tenant is refused with 401. It runs in both tenancies: a TSDB
// per tenant, and one TSDB shared by every tenant, where the tenants'
// identical series must stay apart.
func TestQueriesMatchWhatWasProduced(t *testing.T) {
	t.Parallel()
	for _, tenancy := range []string{tsdbstore.TenancySeparate, tsdbstore.TenancyShared} {
		t.Run(tenancy, func(t *testing.T) {
			t.Parallel()
			testQueriesMatchWhatWasProduced(t, tenancy)
		})
	}
}

func testQueriesMatchWhatWasProduced(t *testing.T, tenancy string) {
	const partitions = 4
	d := dataset{shape: loadgen.Shape{Series: 10, StartMs: recentStart(), StepMs: 1000}, tenants: 8, steps: 200}
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, partitions)
	group := "ferry-" + topic
	storage := t.TempDir()

	cfg := pusherConfig(t, storage)
	cfg.TSDB.Tenancy = tenancy
	p := startPusher(t, cfg)
	cs := startConsumers(t, b, topic, group, p.GRPCAddr(), partitions)
	n := produceSteps(t, manualClient(t, b), topic, d.shape, d.tenants, partitions, 0, d.steps)
	ends := waitCommittedToEnd(t, b, group, topic, time.Minute)
	acks := ackTotals(cs)
	if acks["ok"] != int64(n) || acks["client_error"] != 0 {
		t.Errorf("consumers counted acks %v, want ok=%d and no client_error", acks, n)
	}

	answers := checkQueries(t, p.HTTPAddr(), d)

	// A tenant that never wrote: success with an empty result, and no
	// storage created for it by the read.
	const stranger = "tenant-never-written"
	for _, q := range []string{"count_over_time(ferry_demo_value" + d.rangeSelector() + ")", "ferry_demo_value", "up"} {
		code, r := query(t, p.HTTPAddr(), stranger, q, d.at())
		if code != http.StatusOK || r.Status != "success" || len(r.Data.Result) != 0 {
			t.Errorf("tenant %s, query %q: HTTP %d, status %q, %d series; want 200, success, none",
				stranger, q, code, r.Status, len(r.Data.Result))
		}
	}
	if _, err := os.Stat(filepath.Join(storage, stranger)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("querying tenant %s created storage for it (stat: %v)", stranger, err)
	}
	// No X-Scope-OrgID header at all.
	code, r := query(t, p.HTTPAddr(), "", "ferry_demo_value", d.at())
	if code != http.StatusUnauthorized || r.Status != "error" || r.ErrorType != "unauthorized" {
		t.Errorf("query without %s: HTTP %d, status %q, errorType %q; want 401, error, unauthorized",
			"X-Scope-OrgID", code, r.Status, r.ErrorType)
	}
	stopAll(t, cs)
	t.Logf("%d records (%d tenants x %d steps x %d series) committed to the end %v, acks %v; "+
		"%d queries (count_over_time and sum_over_time per tenant and series at t=%d) all exact "+
		"(count %d, e.g. sum of series 9 = %v); unknown tenant: 200 success, empty; no header: 401 unauthorized",
		n, d.tenants, d.steps, d.shape.Series, ends, acks, len(answers), d.at(), d.steps, d.wantSum(9))
}

// TestPusherRestartKeepsAcknowledgedData checks that what the consumers
// committed survives a crash of the pusher: once every partition is
// committed to its end, the pusher's -storage.path is copied while the
// pusher keeps running, a second pusher is started on the copy, and it must
// answer the same queries with the same figures, then go on ingesting.
//
// Why the copy is a crash: the copy is taken from a store that was never
// closed, so it holds exactly what a process killed at that instant (kill
// -9) would leave on disk: the WAL records each TSDB commit wrote (Ferry's
// store flushes a commit's WAL page before Commit returns, and the consumer
// committed each offset only after the pusher's Sync fsynced those
// segments), the head chunk files in whatever state the asynchronous chunk
// writer left them, and a stale lock file. Nothing of a clean stop happened
// to it: no Store.Close, so no TSDB Close, no final WAL flush or fsync, no
// head compaction into a block. The second pusher therefore has to recover
// the data by replaying the WAL, as after a real crash. (Copying reads the
// page cache, so it stands for a process crash, not a power loss: that
// Sync's fsyncs reach the disk is the tsdbstore tests' business.)
//
// Within the few seconds of the test, the acknowledged samples exist on
// disk in the WAL only: the TSDB m-maps full head chunks to chunks_head in
// the background about once a minute, and cuts no block before the head
// spans 3h. The test logs the copied files to show it.
func TestPusherRestartKeepsAcknowledgedData(t *testing.T) {
	t.Parallel()
	const partitions = 2
	d := dataset{shape: loadgen.Shape{Series: 5, StartMs: recentStart(), StepMs: 1000}, tenants: 4, steps: 150}
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, partitions)
	group := "ferry-" + topic
	cl := manualClient(t, b)

	first := startPusher(t, pusherConfig(t, t.TempDir()))
	cs := startConsumers(t, b, topic, group, first.GRPCAddr(), partitions)
	n := produceSteps(t, cl, topic, d.shape, d.tenants, partitions, 0, d.steps)
	ends := waitCommittedToEnd(t, b, group, topic, time.Minute)
	// The commit to the end was preceded by a Sync. Stop the consumers so
	// that nothing writes to the pusher during the copy; a graceful stop
	// with nothing new to commit does not call the pusher again.
	stopAll(t, cs)

	crashed := filepath.Join(t.TempDir(), "crashed")
	files, size := copyTree(t, first.storage, crashed)
	blocks := countBlocks(t, crashed)
	before := checkQueries(t, first.HTTPAddr(), d)

	second := startPusher(t, pusherConfig(t, crashed))
	after := checkQueries(t, second.HTTPAddr(), d)
	for q, v := range before {
		if after[q] != v {
			t.Errorf("%s: %v before the crash, %v after", q, v, after[q])
		}
	}
	if err := first.stop(t); err != nil {
		t.Errorf("first pusher: %v", err)
	}

	// The restarted pusher goes on: new consumers resume at the committed
	// offsets, and the replayed heads take the next samples in order.
	cs2 := startConsumers(t, b, topic, group, second.GRPCAddr(), partitions)
	n2 := produceSteps(t, cl, topic, d.shape, d.tenants, partitions, d.steps, 50)
	ends2 := waitCommittedToEnd(t, b, group, topic, time.Minute)
	stopAll(t, cs2)
	if acks := ackTotals(cs2); acks["ok"] != int64(n2) {
		t.Errorf("after the restart: acks %v, want ok=%d (only the new records)", acks, n2)
	}
	d.steps += 50
	checkQueries(t, second.HTTPAddr(), d)

	t.Logf("%d records (%d tenants x 150 steps x %d series) committed to the end %v; copied the running pusher's storage "+
		"(%d bytes, %d blocks, files %v); the pusher started on the copy answered "+
		"all %d queries exactly as before (count 150 per series); then %d more records committed to %v and the counts became %d",
		n, d.tenants, d.shape.Series, ends, size, blocks, files, len(before), n2, ends2, d.steps)
}

// copyTree copies the regular files under src to dst, keeping the layout,
// and returns the files (relative to src) and the bytes it copied.
func copyTree(t *testing.T, src, dst string) (files []string, size int64) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case e.IsDir():
			return os.MkdirAll(target, 0o750)
		case e.Type().IsRegular():
			n, err := copyFile(path, target)
			files = append(files, rel)
			size += n
			return err
		default:
			return nil
		}
	})
	if err != nil {
		t.Fatalf("copy %s to %s: %v", src, dst, err)
	}
	return files, size
}

func copyFile(src, dst string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer func() { _ = in.Close() }()
	out, err := os.Create(dst)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	return n, errors.Join(err, out.Close())
}

// countBlocks counts the persisted TSDB blocks (directories with a
// meta.json) under dir.
func countBlocks(t *testing.T, dir string) int {
	t.Helper()
	metas, err := filepath.Glob(filepath.Join(dir, "*", "*", "meta.json"))
	if err != nil {
		t.Fatal(err)
	}
	return len(metas)
}

// syncBuffer is an io.Writer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// logAttr returns attribute key of the first JSON log line whose message
// is msg, and whether there is one.
func logAttr(log, msg, key string) (string, bool) {
	for line := range strings.Lines(log) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != msg {
			continue
		}
		v, _ := rec[key].(string)
		return v, true
	}
	return "", false
}

// counterValue returns the value of a counter (with the given labels) from
// a registry; 0 if it has no such series.
func counterValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// partialRequests returns the two requests of the partial-rejection test
// for a tenant: samples at base+100..110s, then one mixing out-of-order
// samples (base+50..52s) with new ones (base+200..205s), all of one
// series. Each value is its timestamp's offset from base in seconds.
func partialRequests(tenant string, baseMs int64) (good, mixed *prompb.WriteRequest) {
	samples := func(offsets ...[2]int) []prompb.Sample {
		var out []prompb.Sample
		for _, r := range offsets {
			for k := r[0]; k <= r[1]; k++ {
				out = append(out, prompb.Sample{Value: float64(k), Timestamp: baseMs + int64(k)*1000})
			}
		}
		return out
	}
	series := func(s []prompb.Sample) *prompb.WriteRequest {
		return &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Labels: loadgen.SeriesLabels(tenant, 0), Samples: s}}}
	}
	return series(samples([2]int{100, 110})), series(samples([2]int{50, 52}, [2]int{200, 205}))
}

// TestPartiallyBadRequestIsClientErrorAndCommittedPast sends through Kafka
// a good request and then one whose samples are partly out of order. The
// good samples of the second must be stored and queryable, the bad ones
// not; the consumer must count one CLIENT_ERROR and commit past it; and the
// reason must name the series and both counts.
func TestPartiallyBadRequestIsClientErrorAndCommittedPast(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	group := "ferry-" + topic
	base := recentStart()
	const tenant = "tenant-partial"
	good, mixed := partialRequests(tenant, base)

	p := startPusher(t, pusherConfig(t, t.TempDir()))
	var log syncBuffer
	c := startConsumer(t, consumerConfig(t, b, topic, group, "consumer-0", p.GRPCAddr()),
		slog.New(slog.NewJSONHandler(io.MultiWriter(&log, logSink()), &slog.HandlerOptions{Level: slog.LevelInfo})))
	var recs []*kgo.Record
	for _, req := range []*prompb.WriteRequest{good, mixed} {
		v, err := req.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: topic, Partition: 0, Key: []byte(tenant), Value: v})
	}
	produceRecords(t, manualClient(t, b), recs...)
	ends := waitCommittedToEnd(t, b, group, topic, time.Minute)
	if ends[0] != 2 {
		t.Errorf("end offset %d, want 2", ends[0])
	}
	st := c.Consumer.Stats()
	if st.Acks["ok"] != 1 || st.Acks["client_error"] != 1 || st.Acks["server_error"] != 0 || st.Skipped != 1 {
		t.Errorf("consumer Stats: acks %v, skipped %d; want ok=1, client_error=1, server_error=0, skipped=1", st.Acks, st.Skipped)
	}
	if st.Committed[0] != ends[0] {
		t.Errorf("consumer Stats().Committed[0] = %d, want the end offset %d", st.Committed[0], ends[0])
	}

	// Stored: 100..110 and 200..205; not stored: 50..52.
	sel := `ferry_demo_value{series="0"}`
	at := base + 206*1000
	count := queryValue(t, p.HTTPAddr(), tenant, "count_over_time("+sel+"[10m])", at)
	sum := queryValue(t, p.HTTPAddr(), tenant, "sum_over_time("+sel+"[10m])", at)
	wantSum := 0.0
	for k := 100; k <= 110; k++ {
		wantSum += float64(k)
	}
	for k := 200; k <= 205; k++ {
		wantSum += float64(k)
	}
	if count != 17 || sum != wantSum {
		t.Errorf("count_over_time = %v, sum_over_time = %v; want 17 and %v (samples 100..110 and 200..205)", count, sum, wantSum)
	}
	code, r := query(t, p.HTTPAddr(), tenant, "count_over_time("+sel+"[20s])", base+60*1000)
	if code != http.StatusOK || r.Status != "success" || len(r.Data.Result) != 0 {
		t.Errorf("samples 50..52 were stored: count_over_time over (40s, 60s] gave HTTP %d, %v", code, r.Data.Result)
	}

	// The reason as the consumer logged it from the ack.
	var reason string
	waitFor(t, 10*time.Second, "the consumer to log the skipped record", func() bool {
		var ok bool
		reason, ok = logAttr(log.String(), "skipping record: client error", "reason")
		return ok
	})
	checkReason(t, "consumer log", reason, tenant, 6, 3)

	// The pusher's own counts.
	reg := p.Registry
	metricFigures := map[string]float64{
		"requests ok":           counterValue(t, reg, "ferry_pusher_requests_total", map[string]string{"status": "ok"}),
		"requests client_error": counterValue(t, reg, "ferry_pusher_requests_total", map[string]string{"status": "client_error"}),
		"samples accepted":      counterValue(t, reg, "ferry_pusher_samples_total", map[string]string{"outcome": "accepted"}),
		"samples rejected":      counterValue(t, reg, "ferry_pusher_samples_total", map[string]string{"outcome": "rejected"}),
		"tsdb out_of_order":     counterValue(t, reg, "ferry_pusher_tsdb_samples_rejected_total", map[string]string{"reason": "out_of_order"}),
	}
	wantFigures := map[string]float64{"requests ok": 1, "requests client_error": 1, "samples accepted": 17, "samples rejected": 3, "tsdb out_of_order": 3}
	for k, want := range wantFigures {
		if metricFigures[k] != want {
			t.Errorf("pusher metric %s = %v, want %v", k, metricFigures[k], want)
		}
	}

	// The same two requests straight over gRPC with PushOne, for the ack's
	// fields.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()), codec.DialOption())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	client := ferryv1.NewPusherServiceClient(conn)
	const direct = "tenant-partial-direct"
	good, mixed = partialRequests(direct, base)
	resp1, err := client.PushOne(ctx, &ferryv1.PushRequest{RequestId: 1, Tenant: direct, WriteRequest: *good})
	if err != nil {
		t.Fatalf("PushOne: %v", err)
	}
	if resp1.Status != ferryv1.AckStatus_ACK_STATUS_OK || resp1.AcceptedSamples != 11 || resp1.RejectedSamples != 0 {
		t.Errorf("first PushOne: %v, accepted %d, rejected %d (%s); want OK, 11, 0",
			resp1.Status, resp1.AcceptedSamples, resp1.RejectedSamples, resp1.Reason)
	}
	resp2, err := client.PushOne(ctx, &ferryv1.PushRequest{RequestId: 2, Tenant: direct, WriteRequest: *mixed})
	if err != nil {
		t.Fatalf("PushOne: %v", err)
	}
	if resp2.Status != ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR || resp2.AcceptedSamples != 6 || resp2.RejectedSamples != 3 || resp2.RequestId != 2 {
		t.Errorf("mixed PushOne: %v, request %d, accepted %d, rejected %d; want CLIENT_ERROR, 2, 6, 3",
			resp2.Status, resp2.RequestId, resp2.AcceptedSamples, resp2.RejectedSamples)
	}
	checkReason(t, "PushOne ack", resp2.Reason, direct, 6, 3)

	t.Logf("2 records committed to %v; consumer acks %v, skipped %d; stored count %v and sum %v of samples 100..110 and 200..205, "+
		"none of 50..52; pusher metrics %v; reason: %s", ends, st.Acks, st.Skipped, count, sum, metricFigures, resp2.Reason)
}

// checkReason fails unless reason names the out-of-order problem, the
// series and both counts.
func checkReason(t *testing.T, where, reason, tenant string, accepted, rejected int) {
	t.Helper()
	for _, want := range []string{
		"out-of-order",
		`__name__="ferry_demo_value"`,
		`instance="demo-` + tenant + `"`,
		`series="0"`,
		fmt.Sprintf("%d accepted", accepted),
		fmt.Sprintf("%d rejected", rejected),
	} {
		if !strings.Contains(reason, want) {
			t.Errorf("%s: reason %q does not contain %q", where, reason, want)
		}
	}
}

// logSink is where captured logs are also written: stderr with
// FERRY_TEST_LOGS, else nowhere.
func logSink() io.Writer {
	if os.Getenv("FERRY_TEST_LOGS") != "" {
		return os.Stderr
	}
	return io.Discard
}
