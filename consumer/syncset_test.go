package consumer

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/pusher/pushertest"
)

// tenantSyncRecorder is a backend that can sync named tenants alone, and
// records what each Sync asked for.
type tenantSyncRecorder struct {
	pushertest.BackendFunc
	mu    sync.Mutex
	named [][]string // nil for a Sync of every tenant
}

func (r *tenantSyncRecorder) Sync(context.Context) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.named = append(r.named, nil)
	return 0, nil
}

func (r *tenantSyncRecorder) SyncTenants(_ context.Context, tenants []string) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.named = append(r.named, slices.Clone(tenants))
	return len(tenants), nil
}

// TestSyncNamesTheTenantsOfTheCommittedRecords: the consumer's Sync before
// a commit names the tenants of the records it commits, and only those: a
// pusher serving several consumers then syncs no other consumer's tenants.
func TestSyncNamesTheTenantsOfTheCommittedRecords(t *testing.T) {
	t.Parallel()
	const tenants, partitions = 6, 2
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, partitions)
	produce(t, manualClient(t, b), topic, tenants, partitions, 0, 3)
	rec := &tenantSyncRecorder{}
	cfg := testConfig(b.Addrs(), topic, "0", startPusher(t, rec))
	c := startConsumer(t, cfg)
	waitFor(t, 30*time.Second, "partition 0 committed", func() bool { return c.Stats().Committed[0] == 3*tenants/partitions })

	rec.mu.Lock()
	defer rec.mu.Unlock()
	// A Sync for every tenant is allowed, and rare: a commit finds nothing
	// noted when the records it covers finished between the previous
	// commit's snapshot and its Sync, which named their tenants then.
	got := map[string]bool{}
	for _, names := range rec.named {
		for _, n := range names {
			got[n] = true
		}
	}
	if len(got) == 0 {
		t.Fatalf("no Sync named a tenant (syncs: %q)", rec.named)
	}
	for i := range tenants {
		// Tenant i is on partition i mod 2; the consumer reads partition 0.
		if want := i%partitions == 0; got[loadgen.Tenant(i)] != want {
			t.Errorf("the syncs named %s: %v, want %v (syncs: %q)", loadgen.Tenant(i), got[loadgen.Tenant(i)], want, rec.named)
		}
	}
}
