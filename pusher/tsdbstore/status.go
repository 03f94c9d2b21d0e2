package tsdbstore

import (
	"io/fs"
	"path/filepath"
	"sync"
	"time"
)

// TenantStatus is one tenant's state, for the pusher's status page.
type TenantStatus struct {
	Tenant string
	// Open tells whether its TSDB is open; a closed one is on disk only.
	Open bool
	// HeadSeries is the series in memory, 0 when closed.
	HeadSeries uint64
	// SamplesPerSecond is the rate of samples appended between the last
	// two looks at the status, -1 before there were two.
	SamplesPerSecond float64
	// LastWrite is when the tenant was last used, or for a closed tenant
	// when its WAL was last written; zero when unknown.
	LastWrite time.Time
	// StorageBytes is the size of its directory: blocks and WAL; -1 in
	// the shared tenancy, where its data is spread through the shared
	// TSDB's files.
	StorageBytes int64
}

// TenantStatuses returns the state of every tenant with a TSDB, open or on
// disk, in tenant order. It walks each tenant's directory: meant for a
// page an operator opens, not for every scrape.
//
// In the shared tenancy a tenant is open while it is active, and its
// StorageBytes and SamplesPerSecond are unknown (-1): its data is spread
// through the shared TSDB's files.
func (s *Store) TenantStatuses(now time.Time) []TenantStatus {
	if s.cfg.shared() {
		return s.sharedTenantStatuses()
	}
	rates := s.metrics.tsdb.rates.sample(now, s.metrics.tsdb.samplesAppended())
	open := map[string]TenantStatus{}
	s.tenants.eachOpen(func(t *tenantDB) {
		open[t.id] = TenantStatus{Open: true, HeadSeries: t.db.Head().NumSeries(), LastWrite: t.lastUsed}
	})
	var out []TenantStatus
	for _, id := range s.Tenants() {
		st, ok := open[id]
		dir := filepath.Join(s.cfg.Path, id)
		var walWritten time.Time
		st.StorageBytes, walWritten = dirUsage(dir)
		if !ok {
			st.LastWrite = walWritten
		}
		st.Tenant = id
		st.SamplesPerSecond = -1
		if r, ok := rates[id]; ok {
			st.SamplesPerSecond = r
		}
		out = append(out, st)
	}
	return out
}

// dirUsage returns the bytes of the files under dir and the newest
// modification time of a file in its WAL.
func dirUsage(dir string) (int64, time.Time) {
	var size int64
	var walWritten time.Time
	wal := filepath.Join(dir, "wal")
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil //nolint:nilerr // a file deleted meanwhile (compaction) is skipped
		}
		info, err := d.Info()
		if err != nil {
			return nil //nolint:nilerr // as above
		}
		size += info.Size()
		if filepath.Dir(path) == wal && info.ModTime().After(walWritten) {
			walWritten = info.ModTime()
		}
		return nil
	})
	return size, walWritten
}

// rateSampler turns counters read at each look into rates: the increase
// since a snapshot at least minWindow old, per second.
type rateSampler struct {
	mu         sync.Mutex
	prev, last snapshot
}

type snapshot struct {
	at     time.Time
	values map[string]float64
}

// minWindow is the shortest time a rate is computed over.
const minWindow = 2 * time.Second

// sample records values read at now and returns the rates it can compute.
func (r *rateSampler) sample(now time.Time, values map[string]float64) map[string]float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last.at.IsZero() || now.Sub(r.last.at) >= minWindow {
		r.prev, r.last = r.last, snapshot{at: now, values: values}
	}
	out := map[string]float64{}
	if r.prev.at.IsZero() {
		return out
	}
	secs := now.Sub(r.prev.at).Seconds()
	for t, v := range values {
		if old, ok := r.prev.values[t]; ok && v >= old {
			out[t] = (v - old) / secs
		}
	}
	return out
}

// sharedTenantStatuses is TenantStatuses in the shared tenancy.
func (s *Store) sharedTenantStatuses() []TenantStatus {
	series := map[string]uint64{}
	for _, st := range s.sharedOpenTenantStats() {
		series[st.tenant] = st.headSeries
	}
	active := s.tenants.active.snapshot()
	var out []TenantStatus
	for _, id := range s.Tenants() {
		last, open := active[id]
		out = append(out, TenantStatus{Tenant: id, Open: open, HeadSeries: series[id], LastWrite: last, SamplesPerSecond: -1, StorageBytes: -1})
	}
	return out
}
