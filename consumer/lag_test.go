package consumer

import (
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/internal/statuspage"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher"
	"github.com/ferrylabs/ferry/pusher/pushertest"
)

// startConsumerListing runs a consumer that lists end offsets every 50 ms,
// and returns it with its registry.
func startConsumerListing(t *testing.T, cfg Config) (*runningConsumer, *prometheus.Registry) {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	reg := prometheus.NewRegistry()
	c, err := New(cfg, testLogger(t), reg)
	if err != nil {
		t.Fatalf("new consumer: %v", err)
	}
	c.report.interval = 50 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	rc := &runningConsumer{Consumer: c, cancel: cancel, done: make(chan error, 1)}
	go func() { rc.done <- c.Run(ctx) }()
	t.Cleanup(func() { rc.stop(t) })
	return rc, reg
}

// gauge returns the value of the metric name with the given labels, as
// scraped from reg, and -1 when it is absent.
func gauge(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// TestLagGrowsWhileATenantIsRetriedAndReturnsToZeroOnceAcknowledged: a
// pusher answers SERVER_ERROR for tenant-0, so its records stay
// unacknowledged: the lag in records is what was produced, the oldest
// unacknowledged age grows, the tenant is counted as retrying. Once the
// pusher recovers, all of it returns to 0.
func TestLagGrowsWhileATenantIsRetriedAndReturnsToZeroOnceAcknowledged(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	rec := recorderFailing(loadgen.Tenant(0))
	addr := startPusher(t, rec.backend())
	cfg := testConfig(b.Addrs(), topic, "0", addr)
	// One record past the watermark stops the fetching: only the listing
	// of end offsets can see the records produced after it.
	cfg.MaxUncommitted = 1
	rc, reg := startConsumerListing(t, cfg)
	p0 := map[string]string{"partition": "0"}

	waitFor(t, 30*time.Second, "the end offset listed while idle", func() bool {
		return gauge(t, reg, "ferry_consumer_end_offset", p0) == 0 && gauge(t, reg, "ferry_consumer_lag_records", p0) == 0
	})
	produce(t, manualClient(t, b), topic, 1, 1, 0, 5)
	waitFor(t, 30*time.Second, "a lag of 5 records", func() bool {
		return gauge(t, reg, "ferry_consumer_lag_records", p0) == 5 && gauge(t, reg, "ferry_consumer_end_offset", p0) == 5
	})
	cl := manualClient(t, b)
	produce(t, cl, topic, 1, 1, 5, 3)
	waitFor(t, 30*time.Second, "a lag of 8 records, listed while fetching waits", func() bool {
		return gauge(t, reg, "ferry_consumer_lag_records", p0) == 8
	})
	var first float64
	waitFor(t, 30*time.Second, "the tenant retrying", func() bool {
		first = gauge(t, reg, "ferry_consumer_oldest_unacked_record_age_seconds", p0)
		return gauge(t, reg, "ferry_consumer_retrying_tenants", nil) == 1 && first > 0
	})
	waitFor(t, 30*time.Second, "the oldest unacknowledged age to grow", func() bool {
		return gauge(t, reg, "ferry_consumer_oldest_unacked_record_age_seconds", p0) >= first+0.2 &&
			gauge(t, reg, "ferry_consumer_oldest_retrying_tenant_seconds", nil) > 0.2
	})
	checkStatusPage(t, rc.StatusPage(),
		"<td>"+loadgen.Tenant(0)+"</td>",               // in the retrying tenants
		"<tr><td>0</td><td>0</td><td>8</td><td>8</td>", // partition 0: committed 0, end 8, lag 8
		"(stream open)")

	rec.setFail(nil)
	waitFor(t, 30*time.Second, "the lag back to 0", func() bool {
		return gauge(t, reg, "ferry_consumer_lag_records", p0) == 0 &&
			gauge(t, reg, "ferry_consumer_oldest_unacked_record_age_seconds", p0) == 0 &&
			gauge(t, reg, "ferry_consumer_retrying_tenants", nil) == 0 &&
			gauge(t, reg, "ferry_consumer_oldest_retrying_tenant_seconds", nil) == 0
	})
	checkStatusPage(t, rc.StatusPage(), "no tenant is being retried", "<tr><td>0</td><td>8</td><td>8</td><td>0</td><td>0s</td><td>0</td></tr>")
	// The clients' own metrics: franz-go's (kprom) and gRPC's.
	for _, name := range []string{"ferry_consumer_kafka_connects_total", "ferry_consumer_kafka_fetch_bytes_total", "ferry_consumer_grpc_client_started_total"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n == 0 {
			t.Errorf("%s: %d series (%v), want some", name, n, err)
		}
	}
	if lags := rc.Lags(time.Now()); len(lags) != 1 || lags[0].Committed != 8 || lags[0].Pending != 0 {
		t.Errorf("Lags() = %+v, want partition 0 committed at 5 with nothing pending", lags)
	}
}

// gatedBackend applies nothing until open is closed: the records wait
// unacknowledged, as behind a slow pusher.
func gatedBackend(open <-chan struct{}) pushertest.BackendFunc {
	return pushertest.BackendFunc{PushFunc: func(ctx context.Context, _ string, req *prompb.WriteRequest) (pusher.Result, error) {
		select {
		case <-open:
			return pusher.Result{Accepted: pusher.Count(req)}, nil
		case <-ctx.Done():
			return pusher.Result{}, ctx.Err()
		}
	}}
}

// TestReadyWaitsUntilABacklogOfOldRecordsIsCaughtUp produces records an
// hour old before the consumer starts: it must not be ready while they
// wait, and must be once they are acknowledged. Once caught up, a new
// backlog does not make it unready.
func TestReadyWaitsUntilABacklogOfOldRecordsIsCaughtUp(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 2)
	old := time.Now().Add(-time.Hour)
	cl := manualClient(t, b)
	var recs []*kgo.Record
	for step := range 20 {
		tenant := loadgen.Tenant(step % 2)
		recs = append(recs, &kgo.Record{Topic: topic, Partition: int32(step % 2), Key: []byte(tenant),
			Value: testShape.Marshal(tenant, step/2), Timestamp: old})
	}
	produceRecords(t, cl, recs...)

	open := make(chan struct{})
	addr := startPusher(t, gatedBackend(open))
	rc, _ := startConsumerListing(t, testConfig(b.Addrs(), topic, "0,1", addr))

	waitFor(t, 30*time.Second, "records fetched and waiting", func() bool {
		err := rc.Ready()
		return errors.Is(err, ErrNotCaughtUp) && strings.Contains(err.Error(), "behind")
	})
	// Still not ready a while later: the gate is not a timeout.
	time.Sleep(300 * time.Millisecond)
	if err := rc.Ready(); !errors.Is(err, ErrNotCaughtUp) {
		t.Fatalf("Ready() = %v while an hour-old backlog waits, want ErrNotCaughtUp", err)
	}
	close(open)
	waitFor(t, 30*time.Second, "ready once caught up", func() bool { return rc.Ready() == nil })

	// A new hour-old backlog after start-up: lagging is not unready.
	produceRecords(t, cl, &kgo.Record{Topic: topic, Partition: 0, Key: []byte(loadgen.Tenant(0)),
		Value: testShape.Marshal(loadgen.Tenant(0), 100), Timestamp: old})
	if err := rc.Ready(); err != nil {
		t.Errorf("Ready() = %v after start-up with a backlog, want nil", err)
	}
}

func TestReadyAfterStartupFailsOnlyWhenAPeerWasUnreachableTooLong(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		pusherUp, kafkaUp time.Duration // ago
		want              string        // in the error; empty: ready
	}{
		{"should be ready when both answered recently", 5 * time.Second, 5 * time.Second, ""},
		{"should fail when the pusher was unreachable too long", 2 * time.Minute, time.Second, "pusher unreachable"},
		{"should fail when kafka was unreachable too long", time.Second, 2 * time.Minute, "kafka unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var cfg Config
			cfg.RegisterFlags(flag.NewFlagSet("", flag.PanicOnError))
			cfg.KafkaAddress, cfg.Partitions = "127.0.0.1:1", "0"
			c, err := New(cfg, testLogger(t), prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			c.report.lag.caughtUp.Store(true)
			c.report.lag.pusherUp = time.Now().Add(-tc.pusherUp)
			c.report.lag.kafkaUp = time.Now().Add(-tc.kafkaUp)
			err = c.Ready()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Ready() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Ready() = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestTheLagMetricsAreRegistered(t *testing.T) {
	t.Parallel()
	var cfg Config
	cfg.RegisterFlags(flag.NewFlagSet("", flag.PanicOnError))
	cfg.KafkaAddress, cfg.Partitions = "127.0.0.1:1", "0"
	reg := prometheus.NewRegistry()
	if _, err := New(cfg, testLogger(t), reg); err != nil {
		t.Fatal(err)
	}
	// Before the start offsets are known there is no partition to report,
	// but the consumer-wide gauges are there.
	n, err := testutil.GatherAndCount(reg, "ferry_consumer_retrying_tenants", "ferry_consumer_oldest_retrying_tenant_seconds")
	if err != nil || n != 2 {
		t.Errorf("found %d of the retrying gauges (%v), want 2", n, err)
	}
}

// checkStatusPage renders p and fails unless it contains every want.
func checkStatusPage(t *testing.T, p statuspage.Page, want ...string) {
	t.Helper()
	body, err := statuspage.Render(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !strings.Contains(string(body), w) {
			t.Errorf("status page lacks %q:\n%s", w, body)
		}
	}
}

func TestAnEmptyPartitionIsCaughtUpOnceItsEndIsListed(t *testing.T) {
	t.Parallel()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	addr := startPusher(t, newRecorder().backend())
	rc, _ := startConsumerListing(t, testConfig(b.Addrs(), topic, "0", addr))
	waitFor(t, 30*time.Second, "ready on an empty topic", func() bool { return rc.Ready() == nil })
}
