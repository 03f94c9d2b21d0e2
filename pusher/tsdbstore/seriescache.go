package tsdbstore

import (
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunks"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// A series cache remembers the head's reference and labels of each series a
// tenant appended to, by the series' labels exactly as the request carried
// them. In steady state every series of a request exists, and finding it in
// the head took building its labels, hashing them and the head's lookup (a
// lock of a stripe, a map, a comparison of labels): about a fifth of the
// store's CPU at 100 series a request. The cache's key is the request's
// labels written one after the other, which costs a copy of a few dozen
// bytes, and its lookup is one hash and one comparison of those bytes. The
// fourth session's cache, keyed by a hash of each name and value and
// checked against the head's labels, cost what it saved (docs/benchmarks.md).
//
// A key names one series: the labels the store builds from a request's
// (empty values dropped, sorted, the tenant's label added in the shared
// TSDB) depend on nothing else, and each tenant has a cache of its own.
//
// A reference is only ever used with the labels it was found for, and the
// head never gives a reference to two series: a series it removed is not
// found by its old reference, and Append then finds or creates the series
// by its labels. What the cache must not do is say that a series exists
// when the head removed it, since the series limit is checked only before
// a series is created (appendSeries). The head reports each removal
// (PostDeletion); a tenant's cache is emptied when a lookup finds that one
// happened since it was last emptied, and an entry is kept only if no
// removal was reported since before the lookup that found its reference.
// A removal between the head's removing a series and its reporting it is
// the same race as one between GetRef and Append, which the series limit
// has always had.
//
// One appender at a time uses a tenant's cache (acquire): the entries are
// not locked, and a concurrent appender of the same tenant, which is rare
// (one consumer owns a tenant's partition), looks its series up in the
// head as before.

// seriesCaches are the series caches of the tenants appending to one TSDB:
// one in the separate tenancy, one per tenant in the shared TSDB. It is the
// TSDB's lifecycle callback, through which the head reports removals.
type seriesCaches struct {
	// db is the TSDB whose head gives the references: a reopened tenant
	// (recover.go) gets a new head, whose references name other series.
	db *tsdb.DB
	// removals counts the head's reports of removed series.
	removals atomic.Uint64

	mu       sync.Mutex
	byTenant map[string]*seriesCache // guarded by mu
}

// seriesCache is one tenant's cache in one TSDB.
type seriesCache struct {
	owner *seriesCaches
	// busy is held by the appender using entries.
	busy atomic.Bool

	// Owned by the appender holding busy.
	entries map[string]cachedSeries
	// key is the key of the series being appended, kept to reuse its
	// memory.
	key []byte
	// cleared is owner.removals when entries were last emptied: every
	// entry was found after that and before any later removal.
	cleared uint64
}

// cachedSeries is a series' reference and the head's labels of it.
type cachedSeries struct {
	ref storage.SeriesRef
	ls  labels.Labels
}

var _ tsdb.SeriesLifecycleCallback = (*seriesCaches)(nil)

func newSeriesCaches() *seriesCaches {
	return &seriesCaches{byTenant: map[string]*seriesCache{}}
}

// PreCreation allows every series (tsdb.SeriesLifecycleCallback); the
// series limit is checked by appendSeries.
func (*seriesCaches) PreCreation(labels.Labels) error { return nil }

// PostCreation does nothing (tsdb.SeriesLifecycleCallback).
func (*seriesCaches) PostCreation(labels.Labels) {}

// PostDeletion counts a removal of series by the head
// (tsdb.SeriesLifecycleCallback), which invalidates every cache.
func (c *seriesCaches) PostDeletion(deleted map[chunks.HeadSeriesRef]labels.Labels) {
	if len(deleted) > 0 {
		c.removals.Add(1)
	}
}

// epoch returns the removals reported so far, to be read before a lookup
// in a cache or the head whose result may be put into a cache.
func (c *seriesCaches) epoch() uint64 { return c.removals.Load() }

// acquire returns the tenant's cache for an appender of db, or nil when
// another appender holds it or the caches belong to another TSDB of the
// tenant. The caller releases it with release. tenant is "" in the
// separate tenancy.
func (c *seriesCaches) acquire(db *tsdb.DB, tenant string) *seriesCache {
	if c == nil || c.db != db {
		return nil
	}
	c.mu.Lock()
	tc := c.byTenant[tenant]
	if tc == nil {
		tc = &seriesCache{owner: c, cleared: c.epoch()}
		c.byTenant[tenant] = tc
	}
	c.mu.Unlock()
	if !tc.busy.CompareAndSwap(false, true) {
		return nil
	}
	return tc
}

// release lets another appender acquire the cache.
func (c *seriesCache) release() { c.busy.Store(false) }

// cacheKey appends to dst the cache's key of a request's labels: each
// name and value with its length in front, so that no two lists of labels
// share a key.
func cacheKey(dst []byte, ls []prompb.Label) []byte {
	for i := range ls {
		dst = binary.AppendUvarint(dst, uint64(len(ls[i].Name)))
		dst = append(dst, ls[i].Name...)
		dst = binary.AppendUvarint(dst, uint64(len(ls[i].Value)))
		dst = append(dst, ls[i].Value...)
	}
	return dst
}

// get returns the cached reference and labels of the series whose key is
// key, or 0 if there is none; epoch is from epoch(). A removal reported
// since the cache was last emptied empties it.
func (c *seriesCache) get(key []byte, epoch uint64) (storage.SeriesRef, labels.Labels) {
	if epoch != c.cleared {
		// A new map rather than clear: clear keeps the buckets, and a
		// tenant whose series were removed may have gone quiet.
		c.entries = nil
		c.cleared = epoch
		return 0, labels.EmptyLabels()
	}
	e, ok := c.entries[string(key)]
	if !ok {
		return 0, labels.EmptyLabels()
	}
	return e.ref, e.ls
}

// put caches the reference and labels of the series whose key is key,
// found or created after epoch was read; nothing if a removal was reported
// since the cache was last emptied, before epoch was read: the next get
// empties it.
func (c *seriesCache) put(key []byte, ref storage.SeriesRef, ls labels.Labels, epoch uint64) {
	if epoch != c.cleared {
		return
	}
	if c.entries == nil {
		c.entries = map[string]cachedSeries{}
	}
	c.entries[string(key)] = cachedSeries{ref: ref, ls: ls}
}
