package consumer

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ferrylabs/ferry/internal/kafkatest"
)

// TestRetriedTenantIsParkedAndDoesNotStallTheOthers: with a window of 32
// records, a tenant that fails for good would fill it after about 100
// records of a 3-tenant partition and stall the other two. Parked, it
// keeps 4 records in memory; the others are all pushed while it fails,
// and once it recovers its parked records are read again and pushed in
// order.
func TestRetriedTenantIsParkedAndDoesNotStallTheOthers(t *testing.T) {
	t.Parallel()
	const tenants, perTenant = 3, 200
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 1)
	produce(t, manualClient(t, b), topic, tenants, 1, 0, perTenant)

	rec := newRecorder()
	rec.fail = func(tenant string, _ int) error {
		if tenant == "tenant-0" {
			return errors.New("tenant-0's storage is failing")
		}
		return nil
	}
	addr := startPusher(t, rec.backend())
	cfg := testConfig(b.Addrs(), topic, "0", addr)
	cfg.MaxInflightRequests = 32
	cfg.RetryingTenantRecords = 4
	cfg.MaxInflightPerTenant = 2
	c := startConsumer(t, cfg)

	waitFor(t, 30*time.Second, "the healthy tenants pushed", func() bool { return rec.total() == (tenants-1)*perTenant })
	if n, _ := c.window.usage(); n > cfg.MaxInflightRequests {
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
	if n, bytes := c.window.usage(); n != 0 || bytes != 0 {
		t.Errorf("window holds %d records, %d bytes after everything was acknowledged", n, bytes)
	}
}
