package tsdbstore

import (
	"hash/maphash"
	"math/bits"
	"sync/atomic"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunks"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// seriesCache remembers, for one tenant's TSDB, the head's reference of
// each series its requests appended to, by the hash of the series' labels:
// in steady state every series of a request exists, and finding it in the
// head (a lock of a stripe, a map, a comparison of labels) cost more than
// this cache's map and comparison.
//
// A reference is only ever used with the labels it was found for, and the
// head never gives a reference to two series: a series it removed is not
// found by its old reference, and Append then finds or creates the series
// by its labels. What the cache must not do is say that a series exists
// when the head removed it, since the series limit is checked only before
// a series is created (appendSeries). The head reports each removal
// (PostDeletion); the cache is emptied when a lookup finds that one
// happened since it was last emptied, and an entry is kept only if no
// removal was reported since before the lookup that found its reference.
// A removal between the head's removing a series and its reporting it is
// the same race as one between GetRef and Append, which the series limit
// has always had.
//
// One appender at a time uses the cache (acquireCache): the entries are
// not locked, and a concurrent appender of the same tenant, which is rare,
// looks its series up in the head as before.
type seriesCache struct {
	// db is the TSDB whose head gave the references: a reopened tenant
	// (recover.go) gets a new head, whose references name other series.
	db *tsdb.DB
	// removals counts the head's reports of removed series.
	removals atomic.Uint64
	// busy is held by the appender using entries.
	busy atomic.Bool
	// seed keys the hash of a request's labels.
	seed maphash.Seed

	// Owned by the appender holding busy.
	entries map[uint64]cachedSeries
	// cleared is removals when entries were last emptied: every entry was
	// found after that and before any later removal.
	cleared uint64
}

// cachedSeries is a series' reference and the head's labels of it.
type cachedSeries struct {
	ref storage.SeriesRef
	ls  labels.Labels
}

var _ tsdb.SeriesLifecycleCallback = (*seriesCache)(nil)

func newSeriesCache() *seriesCache {
	return &seriesCache{entries: map[uint64]cachedSeries{}, seed: maphash.MakeSeed()}
}

// PreCreation allows every series (tsdb.SeriesLifecycleCallback); the
// series limit is checked by appendSeries.
func (*seriesCache) PreCreation(labels.Labels) error { return nil }

// PostCreation does nothing (tsdb.SeriesLifecycleCallback).
func (*seriesCache) PostCreation(labels.Labels) {}

// PostDeletion counts a removal of series by the head
// (tsdb.SeriesLifecycleCallback), which invalidates the cache.
func (c *seriesCache) PostDeletion(deleted map[chunks.HeadSeriesRef]labels.Labels) {
	if len(deleted) > 0 {
		c.removals.Add(1)
	}
}

// acquireCache returns t's series cache for the appender app of db, or nil
// when another appender holds it or it belongs to another TSDB of the
// tenant. The caller releases it with releaseCache.
func acquireCache(t *tenantDB, db *tsdb.DB) *seriesCache {
	c := t.cache.Load()
	if c == nil || c.db != db || !c.busy.CompareAndSwap(false, true) {
		return nil
	}
	return c
}

// release lets another appender acquire the cache.
func (c *seriesCache) release() { c.busy.Store(false) }

// epoch returns the removals reported so far, to be read before a lookup
// in the cache or the head whose result may be put into the cache.
func (c *seriesCache) epoch() uint64 { return c.removals.Load() }

// hash returns the key of a request's labels, and false when they are not
// the series' labels as they stand: a label with an empty value (which
// is absent), or names not in strictly increasing order. Senders send
// sorted labels; the others are looked up in the head only.
func (c *seriesCache) hash(ls []prompb.Label) (uint64, bool) {
	h, prev := uint64(len(ls)), ""
	for i := range ls {
		l := &ls[i]
		if l.Value == "" || l.Name <= prev {
			return 0, false
		}
		prev = l.Name
		h = mix(h, maphash.String(c.seed, l.Name))
		h = mix(h, maphash.String(c.seed, l.Value))
	}
	return h, true
}

// mix folds x into the hash h, in order.
func mix(h, x uint64) uint64 {
	return bits.RotateLeft64(h^x, 27) * 0x9e3779b97f4a7c15
}

// get returns the cached reference and labels of the series named by a
// request's labels req, whose key (hash) is key, or 0 if there is none;
// epoch is from epoch().
func (c *seriesCache) get(key uint64, req []prompb.Label, epoch uint64) (storage.SeriesRef, labels.Labels) {
	if epoch != c.cleared {
		clear(c.entries)
		c.cleared = epoch
		return 0, labels.EmptyLabels()
	}
	e, ok := c.entries[key]
	if !ok || !sameLabels(e.ls, req) {
		return 0, labels.EmptyLabels()
	}
	return e.ref, e.ls
}

// sameLabels reports whether ls are the labels req, in the same order.
func sameLabels(ls labels.Labels, req []prompb.Label) bool {
	i, same := 0, true
	ls.Range(func(l labels.Label) {
		if !same {
			return
		}
		if i >= len(req) || req[i].Name != l.Name || req[i].Value != l.Value {
			same = false
			return
		}
		i++
	})
	return same && i == len(req)
}

// put caches the reference and labels of a series found or created after
// epoch was read; nothing if a removal was reported since the cache was
// last emptied, before epoch was read: the next get empties it.
func (c *seriesCache) put(key uint64, ref storage.SeriesRef, ls labels.Labels, epoch uint64) {
	if epoch != c.cleared {
		return
	}
	c.entries[key] = cachedSeries{ref: ref, ls: ls}
}
