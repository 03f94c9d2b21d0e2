package tsdbstore

import (
	"fmt"
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
// Several keys may name one series (a sender that spells it unsorted, or
// with an empty label); they share its entry, which is also where the
// appender keeps the series' newest sample (see lastAppended), in place of
// a map by reference that cost as much as a lookup.
//
// A reference is only ever used with the labels it was found for, and the
// head never gives a reference to two series: a series it removed is not
// found by its old reference, and Append then finds or creates the series
// by its labels. What the cache must not do is say that a series exists
// when the head removed it, since the series limit is checked only before
// a series is created (appendSeries). The head reports each removal
// (PostDeletion). From then on the appender holding the cache looks every
// series up in the head, keeping the entries for their newest samples, and
// the next appender finds the cache emptied. A removal between the head's
// removing a series and its reporting it is the same race as one between
// GetRef and Append, which the series limit has always had.
//
// One appender at a time uses a tenant's cache (acquire): the entries are
// not locked, and a concurrent appender of the same tenant, which is rare
// (one consumer owns a tenant's partition), looks its series up in the
// head and keeps their newest samples in a map, as before.
//
// Where its code is: this file holds the cache, its lifecycle with the
// head and what a series it does not know takes; a batch holds the cache
// from newBatch to its commit (acquire, release: batch.go), and the
// look-ups of a series it knows are beside appendSeries (request.go).

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
	// busy is held by the appender using the cache.
	busy atomic.Bool

	// The rest is owned by the appender holding busy.

	// index gives the position in series of each key: every spelling of
	// a series that came (sorted, unsorted, with empty values) names its
	// one entry, so that the series' newest sample in the appender is
	// found whatever the spelling.
	index  map[string]int
	series []cachedSeries
	// cleared is owner.removals when the entries were last emptied:
	// every reference in them was found after that. Once a removal is
	// reported, the holder stops trusting them (trusted), and the next
	// acquire empties them.
	cleared uint64
	// gen numbers the appenders that held the cache: an entry's last
	// sample is the holder's when its gen is this.
	gen uint64
	// histograms are the entries whose last sample is a histogram, let go
	// at release so the cache does not keep histograms alive.
	histograms []int
	// prev is the entry looked up last, -1 for none: see lookup.
	prev int
	// key and canon are the keys being looked up, kept to reuse their
	// memory.
	key, canon []byte
}

// cachedSeries is a series' reference and the head's labels of it, and
// its newest sample in the appender numbered gen.
type cachedSeries struct {
	// key is the series' sorted spelling, its key in index.
	key string
	// next is 1 + the position of the series looked up after this one
	// last time; 0 for none.
	next int
	ref  storage.SeriesRef
	ls   labels.Labels
	last lastAppended
	gen  uint64
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
// (tsdb.SeriesLifecycleCallback), which invalidates every cache, and drops
// the caches no appender holds: a tenant of the shared TSDB that stopped
// writing would otherwise keep its cache, and the labels of its removed
// series, until it wrote again. A held cache is emptied by the next
// acquire.
func (c *seriesCaches) PostDeletion(deleted map[chunks.HeadSeriesRef]labels.Labels) {
	if len(deleted) == 0 {
		return
	}
	c.removals.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	for tenant, tc := range c.byTenant {
		// Claimed for good: the cache is out of the map, and acquire
		// makes a new one.
		if tc.busy.CompareAndSwap(false, true) {
			delete(c.byTenant, tenant)
		}
	}
}

// epoch returns the removals reported so far, to be read before a lookup
// in a cache or the head whose result may be put into a cache.
func (c *seriesCaches) epoch() uint64 { return c.removals.Load() }

// A series the cache does not know, or no longer trusts (appendSeries,
// request.go): another spelling of it may have its entry (find), else its
// labels are built from the request's and looked up in the head
// (findSeries); once appended to, the cache remembers it (remember).

// find returns the position of the entry of the series ls, the labels the
// store built from the spelling lookup last missed, if another spelling
// has one; else -1. ls is keyed as a sender would spell it sorted: without
// the tenant's label, which the shared TSDB adds (withTenant).
func (c *seriesCache) find(ls labels.Labels, withTenant bool) int {
	c.canon = c.canon[:0]
	ls.Range(func(l labels.Label) {
		if !withTenant || l.Name != tenantLabel {
			c.canon = appendLabel(c.canon, l.Name, l.Value)
		}
	})
	if string(c.canon) == string(c.key) {
		return -1 // lookup missed this very key
	}
	if i, ok := c.index[string(c.canon)]; ok {
		return i
	}
	return -1
}

// remember makes the spelling lookup last missed name the entry of its
// series at position i, which find returned, creating the entry when i
// is -1. Only a series the head has is remembered (the caller's ref is
// not 0), so entries never outnumber the head's series; and a series gets
// a key for one spelling besides its sorted one, which keeps a sender
// that invents spellings (empty labels of ever new names) from growing
// the cache: the other spellings are found through find on every request.
func (c *seriesCache) remember(i int) int {
	if i < 0 {
		key := string(c.canon)
		i = len(c.series)
		c.series = append(c.series, cachedSeries{key: key})
		c.index[key] = i
	}
	if string(c.key) != string(c.canon) && len(c.index) < 2*len(c.series) {
		c.index[string(c.key)] = i
	}
	c.follow(i)
	return i
}

// findSeries builds the series' labels from ts's and looks them up in the
// head. It returns the head's reference and labels of the series, or 0 and
// labels of its own to create it with; false when the series is rejected.
func (r *request) findSeries(ts *prompb.TimeSeries) (storage.SeriesRef, labels.Labels, bool) {
	r.builder.Reset()
	// Senders send labels sorted by name; checking that while adding them
	// costs less than sorting them again (a comparison through a closure
	// per label even when they are in order).
	sorted, prev := true, ""
	// In the shared TSDB the tenant's label goes where it sorts, so that
	// labels sent sorted stay sorted.
	tenant := r.batch.tenant
	for _, l := range ts.Labels {
		if r.batch.tenant != "" && l.Name == tenantLabel && l.Value != "" {
			r.rejectSeries(ts, sentLabels(ts), fmt.Errorf("%w: %s names the tenant in the shared TSDB (-storage.tenancy=shared)", errReservedLabel, tenantLabel))
			return 0, labels.EmptyLabels(), false
		}
		if tenant != "" && l.Name > tenantLabel {
			r.builder.Add(tenantLabel, tenant)
			sorted, prev, tenant = sorted && prev < tenantLabel, tenantLabel, ""
		}
		// Prometheus treats a label with an empty value as absent:
		// {job="a",x=""} is the series {job="a"}.
		if l.Value != "" {
			r.builder.Add(l.Name, l.Value)
			sorted = sorted && prev < l.Name
			prev = l.Name
		}
	}
	if tenant != "" {
		r.builder.Add(tenantLabel, tenant)
		sorted = sorted && prev < tenantLabel
	}
	if !sorted {
		r.builder.Sort()
	}
	// Look the series up with reused memory and keep the head's own copy of
	// its labels: in steady state no series is new, and this saves an
	// allocation per series. Only a new series needs labels of its own,
	// since the head keeps them.
	r.builder.Overwrite(&r.scratch)
	ref, ls := r.getRef(r.scratch)
	if ref == 0 {
		ls = r.builder.Labels()
	}
	return ref, ls, true
}

// headSeries returns the tenant's series in the head, for the series limit.
// r.t.seriesMu is held.
func (r *request) headSeries() (uint64, error) {
	if r.batch.tenant == "" {
		return r.t.db.Head().NumSeries(), nil
	}
	return r.t.tenantSeries(r.batch.tenant, uint64(r.w.cfg.MaxSeriesPerTenant)) //nolint:gosec // Validate refuses a negative limit
}

// rejectSeries rejects every sample, histogram and exemplar of ts for err.
func (r *request) rejectSeries(ts *prompb.TimeSeries, ls labels.Labels, err error) {
	for range len(ts.Samples) + len(ts.Histograms) + len(ts.Exemplars) {
		r.reject(ls, err)
	}
}

// sentLabels are the series' labels as sent, for an error message.
func sentLabels(ts *prompb.TimeSeries) labels.Labels {
	b := labels.NewScratchBuilder(len(ts.Labels))
	for _, l := range ts.Labels {
		b.Add(l.Name, l.Value)
	}
	b.Sort()
	return b.Labels()
}

// getRef returns the head's reference and labels of the series; 0 and
// empty labels if the head has no such series.
func (r *request) getRef(ls labels.Labels) (storage.SeriesRef, labels.Labels) {
	if g, ok := r.app.(storage.GetRef); ok {
		return g.GetRef(ls, ls.Hash())
	}
	return 0, labels.EmptyLabels()
}
