package consumer

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/ferrylabs/ferry/internal/kafkatest"
)

// parkingLimits are the consumer's bounds in a parking test.
type parkingLimits struct {
	window   int // -consumer.max-inflight-requests
	share    int // -consumer.retrying-tenant-records
	inflight int // -consumer.max-inflight-per-tenant
}

// startParking produces perTenant records for each of tenants on a
// one-partition topic and runs a consumer with limits into a pusher whose
// tenant-0 fails until rec.setFail(nil).
func startParking(t *testing.T, tenants, perTenant int, limits parkingLimits) (*kafkatest.Broker, string, *recorder, Config, *runningConsumer) {
	t.Helper()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	produce(t, manualClient(t, b), topic, tenants, 1, 0, perTenant)
	rec := recorderFailing("tenant-0")
	cfg := testConfig(b.Addrs(), topic, "0", startPusher(t, rec.backend()))
	cfg.MaxInflightRequests = limits.window
	cfg.RetryingTenantRecords = limits.share
	cfg.MaxInflightPerTenant = limits.inflight
	return b, topic, rec, cfg, startConsumer(t, cfg)
}

// TestRetriedTenantIsParkedAndDoesNotStallTheOthers: with a window of 32
// records, a tenant that fails for good would fill it after about 100
// records of a 3-tenant partition and stall the other two. Parked, it
// keeps 4 records in memory; the others are all pushed while it fails,
// and once it recovers its parked records are read again and pushed in
// order.
func TestRetriedTenantIsParkedAndDoesNotStallTheOthers(t *testing.T) {
	t.Parallel()
	const tenants, perTenant = 3, 200
	b, topic, rec, cfg, c := startParking(t, tenants, perTenant, parkingLimits{window: 32, share: 4, inflight: 2})

	waitFor(t, 30*time.Second, "the healthy tenants pushed", func() bool { return rec.total() == (tenants-1)*perTenant })
	if n, _ := c.lanes.Usage(); n > cfg.MaxInflightRequests {
		t.Errorf("window holds %d records, more than its %d", n, cfg.MaxInflightRequests)
	}
	parked := testutil.ToFloat64(c.metrics.parked)
	if parked < perTenant/2 {
		t.Errorf("%v records parked, want most of tenant-0's %d", parked, perTenant)
	}
	rec.setFail(nil)
	waitCommitted(t, b, cfg.ConsumerGroup, topic, 30*time.Second)
	checkSteps(t, rec.snapshot(), tenants, perTenant, nil)
	if got := testutil.ToFloat64(c.metrics.reread); got != parked {
		t.Errorf("%v records read again, want the %v parked", got, parked)
	}
	if n, bytes := c.lanes.Usage(); n != 0 || bytes != 0 {
		t.Errorf("window holds %d records, %d bytes after everything was acknowledged", n, bytes)
	}
}

// TestParkedRecordsDeletedFromKafkaAreSkippedAsExpired deletes the log
// below its end while a tenant's records are parked: when the tenant
// recovers, the records that are gone are counted and skipped as client
// errors (cause expired), the rest is pushed, and the partition is
// committed to its end instead of waiting forever.
func TestParkedRecordsDeletedFromKafkaAreSkippedAsExpired(t *testing.T) {
	t.Parallel()
	const tenants, perTenant = 2, 100
	b, topic, rec, cfg, c := startParking(t, tenants, perTenant, parkingLimits{window: 16, share: 2, inflight: 1})
	waitFor(t, 30*time.Second, "tenant-1 pushed", func() bool { return rec.total() == perTenant })

	// Records alternate tenant-0, tenant-1: delete everything but the last
	// ten, which hold tenant-0's last five.
	end := b.EndOffsets(t, topic)[0]
	var del kadm.Offsets
	del.AddOffset(topic, 0, end-10, -1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := b.Admin(t).DeleteRecords(ctx, del)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("delete records below %d: %v", end-10, err)
	}
	rec.setFail(nil)
	waitCommitted(t, b, cfg.ConsumerGroup, topic, 30*time.Second)

	expired := testutil.ToFloat64(c.metrics.clientErrors.WithLabelValues("expired"))
	if expired == 0 {
		t.Fatal("no record was skipped as expired although parked records were deleted")
	}
	got := rec.snapshot()["tenant-0"]
	if int(expired)+len(got) != perTenant {
		t.Errorf("tenant-0: %d records pushed and %v expired, want %d in all", len(got), expired, perTenant)
	}
	for _, step := range []int{95, 96, 97, 98, 99} {
		if !slices.Contains(got, step) {
			t.Errorf("tenant-0's step %d, still in the log, was not pushed (pushed %v)", step, got)
		}
	}
	if !slices.IsSorted(got) {
		t.Errorf("tenant-0's steps out of order: %v", got)
	}
}
