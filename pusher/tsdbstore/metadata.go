package tsdbstore

import (
	"maps"
	"strings"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// Metric metadata (type, help, unit), kept in memory per tenant.

// storeMetadata keeps the latest metadata of each metric family. Metadata is
// held in memory only and not persisted: senders resend it periodically
// (Prometheus every minute by default), so a restart loses it only briefly.
func (s *Store) storeMetadata(tenant string, mds []prompb.MetricMetadata) {
	if len(mds) == 0 {
		return
	}
	dropped := 0
	s.metaMu.Lock()
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
		// Clone so that the map does not pin the request's memory.
		m[strings.Clone(md.MetricFamilyName)] = prompb.MetricMetadata{
			Type:             md.Type,
			MetricFamilyName: strings.Clone(md.MetricFamilyName),
			Help:             strings.Clone(md.Help),
			Unit:             strings.Clone(md.Unit),
		}
	}
	s.metaMu.Unlock()
	if dropped > 0 {
		s.metrics.metadataDropped.Add(float64(dropped))
	}
}

// Metadata returns a copy of the latest metadata per metric family the
// tenant sent since the Store was created.
func (s *Store) Metadata(tenant string) map[string]prompb.MetricMetadata {
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	return maps.Clone(s.metadata[tenant])
}
