package tsdbstore

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/prometheus/tsdb"

	"github.com/ferrylabs/ferry/pusher/backend"
)

// newTestRegistry returns a registry whose TSDBs are stand-ins: it never
// looks inside one. closed receives the IDs it closes.
func newTestRegistry(t *testing.T, modify func(*Config)) (*registry, chan string) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Path = t.TempDir()
	cfg.IdleTimeout = time.Hour // closeIdle is called by hand
	if modify != nil {
		modify(&cfg)
	}
	r := newRegistry(&cfg, slog.New(slog.DiscardHandler), newMetrics(nil))
	closed := make(chan string, 16)
	r.open = func(*tenantDB) (*tsdb.DB, error) { return &tsdb.DB{}, nil }
	r.close = func(t *tenantDB, _ string) {
		closed <- t.id
		r.forget(t)
	}
	go r.idleLoop()
	t.Cleanup(func() { r.shut() })
	return r, closed
}

func TestTheRegistryAdmitsATenantBeyondTheLimitOnceAnIdleOneClosed(t *testing.T) {
	r, closed := newTestRegistry(t, func(c *Config) { c.Tenancy = TenancySeparate; c.MaxTenants = 1 })
	ctx := context.Background()
	a, err := r.acquire(ctx, "a", true)
	if err != nil {
		t.Fatal(err)
	}
	r.release(a)
	_, err = r.acquire(ctx, "b", true)
	var se *backend.ServerError
	if !errors.As(err, &se) || !errors.Is(err, errTenantLimit) || se.RetryAfter != r.cfg.idleCheckInterval() {
		t.Fatalf("error %v, want a server error for the tenant limit with the idle check's retry hint", err)
	}
	r.closeIdle(time.Now().Add(2 * time.Hour))
	if id := <-closed; id != "a" {
		t.Fatalf("closed %s, want a", id)
	}
	b, err := r.acquire(ctx, "b", true)
	if err != nil {
		t.Fatalf("tenant b after a closed: %v", err)
	}
	r.release(b)
}

func TestTheRegistryClosesNoReferencedTSDBAndShutWaitsForTheReference(t *testing.T) {
	r, closed := newTestRegistry(t, nil)
	a, err := r.acquire(context.Background(), "a", true)
	if err != nil {
		t.Fatal(err)
	}
	r.closeIdle(time.Now().Add(2 * time.Hour))
	select {
	case id := <-closed:
		t.Fatalf("closed %s while it was referenced", id)
	default:
	}
	shut := make(chan []*tenantDB)
	go func() {
		tenants, _ := r.shut()
		shut <- tenants
	}()
	select {
	case <-shut:
		t.Fatal("shut returned while a reference was held")
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := r.acquire(context.Background(), "b", true); !errors.Is(err, backend.ErrShuttingDown) {
		t.Fatalf("acquire while shutting down: %v, want ErrShuttingDown", err)
	}
	r.release(a)
	if tenants := <-shut; len(tenants) != 1 || tenants[0] != a {
		t.Fatalf("shut handed over %v, want tenant a", tenants)
	}
}

func TestAReadOpensNoTenantThatIsNotOnDisk(t *testing.T) {
	r, _ := newTestRegistry(t, nil)
	opened := false
	r.open = func(*tenantDB) (*tsdb.DB, error) { opened = true; return &tsdb.DB{}, nil }
	got, err := r.acquire(context.Background(), "nobody", false)
	if got != nil || err != nil || opened || !r.empty() {
		t.Fatalf("read of an unknown tenant: %v, %v (opened %v)", got, err, opened)
	}
}
