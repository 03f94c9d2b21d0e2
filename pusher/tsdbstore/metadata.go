package tsdbstore

import (
	"log/slog"
	"maps"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// metadataStore keeps each tenant's metric metadata (type, help, unit per
// metric family) in memory and, from Sync, in a metadata.json per tenant
// (metadatafile.go). It is apart from the TSDBs: a metadata-only push
// opens none, and the metadata outlives a tenant's idle close.
type metadataStore struct {
	root string // -storage.path; a tenant's file is in root/<tenant>
	// limit is -limits.max-metadata-per-tenant; 0 is unlimited.
	limit   int
	logger  *slog.Logger
	dropped prometheus.Counter // families dropped at the limit

	mu       sync.Mutex
	byTenant map[string]map[string]prompb.MetricMetadata // tenant -> family -> metadata
	// files tracks what was read and written; see metadatafile.go.
	files metadataFiles
}

func newMetadataStore(root string, limit int, logger *slog.Logger, dropped prometheus.Counter) *metadataStore {
	return &metadataStore{root: root, limit: limit, logger: logger, dropped: dropped,
		byTenant: make(map[string]map[string]prompb.MetricMetadata)}
}

// store keeps the latest metadata of each metric family. persist writes
// it to the tenants' files.
func (ms *metadataStore) store(tenant string, mds []prompb.MetricMetadata) {
	if len(mds) == 0 {
		return
	}
	dropped := 0
	ms.mu.Lock()
	ms.loadLocked(tenant)
	m := ms.byTenant[tenant]
	if m == nil {
		m = make(map[string]prompb.MetricMetadata)
		ms.byTenant[tenant] = m
	}
	for _, md := range mds {
		if md.MetricFamilyName == "" {
			continue
		}
		if _, ok := m[md.MetricFamilyName]; !ok && ms.limit > 0 && len(m) >= ms.limit {
			dropped++
			continue
		}
		if old, ok := m[md.MetricFamilyName]; ok && old.Type == md.Type && old.Help == md.Help && old.Unit == md.Unit {
			continue // The usual periodic resend: nothing to persist.
		}
		// Clone so that the map does not pin the request's memory.
		m[strings.Clone(md.MetricFamilyName)] = prompb.MetricMetadata{
			Type:             md.Type,
			MetricFamilyName: strings.Clone(md.MetricFamilyName),
			Help:             strings.Clone(md.Help),
			Unit:             strings.Clone(md.Unit),
		}
		ms.changedLocked(tenant)
	}
	ms.mu.Unlock()
	if dropped > 0 {
		ms.dropped.Add(float64(dropped))
	}
}

// get returns a copy of the latest metadata per metric family the tenant
// sent, including before a restart.
func (ms *metadataStore) get(tenant string) map[string]prompb.MetricMetadata {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	ms.loadLocked(tenant)
	return maps.Clone(ms.byTenant[tenant])
}

// Metadata returns a copy of the latest metadata per metric family the
// tenant sent, including before a restart.
func (s *Store) Metadata(tenant string) map[string]prompb.MetricMetadata {
	return s.meta.get(tenant)
}
