package tsdbstore

import (
	"maps"
	"strings"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// Metric metadata (type, help, unit), kept in memory per tenant and
// persisted by Sync in a metadata.json per tenant (metadatafile.go).

// storeMetadata keeps the latest metadata of each metric family. Sync
// persists it (metadatafile.go).
func (s *Store) storeMetadata(tenant string, mds []prompb.MetricMetadata) {
	if len(mds) == 0 {
		return
	}
	dropped := 0
	s.metaMu.Lock()
	s.loadMetadataLocked(tenant)
	m := s.metadata[tenant]
	if m == nil {
		m = make(map[string]prompb.MetricMetadata)
		s.metadata[tenant] = m
	}
	for _, md := range mds {
		if md.MetricFamilyName == "" {
			continue
		}
		if _, ok := m[md.MetricFamilyName]; !ok && s.cfg.MaxMetadataPerTenant > 0 && len(m) >= s.cfg.MaxMetadataPerTenant {
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
		s.metadataChangedLocked(tenant)
	}
	s.metaMu.Unlock()
	if dropped > 0 {
		s.metrics.metadataDropped.Add(float64(dropped))
	}
}

// Metadata returns a copy of the latest metadata per metric family the
// tenant sent, including before a restart.
func (s *Store) Metadata(tenant string) map[string]prompb.MetricMetadata {
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	s.loadMetadataLocked(tenant)
	return maps.Clone(s.metadata[tenant])
}
