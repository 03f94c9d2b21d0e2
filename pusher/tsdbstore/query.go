package tsdbstore

import (
	"context"
	"sync"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/ferrylabs/ferry/pusher/backend"
)

// Reads: the Store is a backend.Querier, so the pusher serves the query
// API over it.

var _ backend.Querier = (*Store)(nil)

// Queryable returns the tenant's data for queries. Each Querier it creates
// holds the tenant's TSDB open until the Querier is closed; a tenant that
// never wrote gets an empty Querier and no directory is created. A Querier
// of a closed Store fails with a server error.
func (s *Store) Queryable(tenant string) storage.Queryable {
	return storage.QueryableFunc(func(mint, maxt int64) (storage.Querier, error) {
		if err := validateTenant(tenant); err != nil {
			return storage.NoopQuerier(), nil
		}
		t, err := s.tenants.acquire(context.Background(), s.cfg.dbID(tenant), false)
		if err != nil {
			return nil, requestError("query", err)
		}
		if t == nil {
			return storage.NoopQuerier(), nil
		}
		q, err := t.db.Querier(mint, maxt)
		if err != nil {
			s.tenants.release(t)
			return nil, requestError("query", err)
		}
		if s.cfg.shared() {
			q = tenantQuerier(q, tenant)
		}
		return &releasingQuerier{Querier: q, release: func() { s.tenants.release(t) }}, nil
	})
}

// releasingQuerier releases the tenant's reference when the Querier closes.
type releasingQuerier struct {
	storage.Querier
	once    sync.Once
	release func()
}

func (q *releasingQuerier) Close() error {
	err := q.Querier.Close()
	q.once.Do(q.release)
	return err
}

// ExemplarQueryable returns the tenant's exemplars for queries. Exemplars
// live in memory only: a tenant whose TSDB is closed has exactly those its
// WAL replay restores when it is opened.
func (s *Store) ExemplarQueryable(tenant string) storage.ExemplarQueryable {
	return exemplarQueryableFunc(func(ctx context.Context) (storage.ExemplarQuerier, error) {
		if err := validateTenant(tenant); err != nil {
			return emptyExemplarQuerier{}, nil
		}
		t, err := s.tenants.acquire(ctx, s.cfg.dbID(tenant), false)
		if err != nil {
			return nil, requestError("exemplar query", err)
		}
		if t == nil {
			return emptyExemplarQuerier{}, nil
		}
		// The exemplar querier reads the in-memory circular buffer, which
		// stays valid after the DB closes, so no reference is kept.
		defer s.tenants.release(t)
		q, err := t.db.ExemplarQuerier(ctx)
		if err != nil {
			return nil, requestError("exemplar query", err)
		}
		if s.cfg.shared() {
			q = tenantExemplarQuerier(q, tenant)
		}
		return q, nil
	})
}

type exemplarQueryableFunc func(ctx context.Context) (storage.ExemplarQuerier, error)

func (f exemplarQueryableFunc) ExemplarQuerier(ctx context.Context) (storage.ExemplarQuerier, error) {
	return f(ctx)
}

type emptyExemplarQuerier struct{}

func (emptyExemplarQuerier) Select(int64, int64, ...[]*labels.Matcher) ([]exemplar.QueryResult, error) {
	return nil, nil
}
