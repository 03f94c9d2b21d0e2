package integration

import (
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/loadgen"
)

// TestTenantsBeyondTheLimitAreRetriedNotSkipped runs the pipeline on the
// real broker with a pusher that may hold 2 tenants open and 10 tenants
// writing at once. A tenant the pusher has no room for is a capacity
// condition, not bad data: its records are answered SERVER_ERROR, the
// consumer retries them, and each tenant is admitted once an idle one
// closes. Every sample must be stored and none skipped; before, 8 of the
// 10 tenants' records were answered CLIENT_ERROR (tenant_limit) and lost.
func TestTenantsBeyondTheLimitAreRetriedNotSkipped(t *testing.T) {
	t.Parallel()
	const partitions = 2
	d := dataset{shape: loadgen.Shape{Series: 3, StartMs: recentStart(), StepMs: 1000}, tenants: 10, steps: 20}
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, partitions)
	group := "ferry-" + topic

	cfg := pusherConfig(t, t.TempDir())
	cfg.TSDB.MaxTenants = 2
	cfg.TSDB.IdleTimeout = time.Second
	p := startPusher(t, cfg)
	cs := startConsumers(t, b, topic, group, p.GRPCAddr(), partitions)
	n := produceSteps(t, manualClient(t, b), topic, d.shape, d.tenants, partitions, 0, d.steps)
	ends := waitCommittedToEnd(t, b, group, topic, 2*time.Minute)
	acks := ackTotals(cs)
	if acks["ok"] != int64(n) || acks["client_error"] != 0 {
		t.Errorf("consumers counted acks %v, want ok=%d and no client_error", acks, n)
	}
	if acks["server_error"] == 0 {
		t.Errorf("consumers counted acks %v: no SERVER_ERROR, so the tenant limit was never reached and the test proves nothing", acks)
	}
	answers := checkQueries(t, p.HTTPAddr(), d)
	stopAll(t, cs)
	t.Logf("%d records of %d tenants through a pusher holding 2 open: committed to the end %v, acks %v, %d queries exact",
		n, d.tenants, ends, acks, len(answers))
}
