package tsdbstore

import (
	"cmp"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the backend's own metrics, and a few of the TSDBs' own
// summed over tenants (tsdbmetrics.go): registered as they are, every
// tenant's DB would register the same names.
type metrics struct {
	samplesAccepted    prometheus.Counter
	samplesRejected    *prometheus.CounterVec
	replaysAccepted    prometheus.Counter
	exemplarsDropped   prometheus.Counter
	metadataDropped    prometheus.Counter
	tenantOpens        prometheus.Counter
	tenantOpenFailures prometheus.Counter
	tenantCloses       *prometheus.CounterVec
	capacityRefusals   *prometheus.CounterVec
	syncDuration       prometheus.Histogram
	syncFailures       prometheus.Counter
	storageLost        prometheus.Counter
	recoveries         *prometheus.CounterVec
	writebackFailures  prometheus.Counter
	// tsdb sums the tenants' TSDB metrics (tsdbmetrics.go).
	tsdb *tsdbMetrics
}

// newMetrics returns the store's metrics; register registers them.
func newMetrics(s *Store) *metrics {
	m := &metrics{
		samplesAccepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_pusher_tsdb_samples_accepted_total",
			Help: "Samples, histogram samples and exemplars appended to a tenant TSDB, including identical replays of stored samples.",
		}),
		samplesRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_pusher_tsdb_samples_rejected_total",
			Help: "Samples, histogram samples and exemplars rejected as client errors, by reason.",
		}, []string{"reason"}),
		replaysAccepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_pusher_tsdb_replayed_samples_total",
			Help: "Samples the TSDB refused as out of order or too old but that were already stored with the same value, so they were accepted as replays.",
		}),
		exemplarsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_pusher_tsdb_exemplars_dropped_total",
			Help: "Exemplars accepted but not stored because -storage.max-exemplars is 0.",
		}),
		metadataDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_pusher_tsdb_metadata_dropped_total",
			Help: "Metric family metadata entries dropped because of -limits.max-metadata-per-tenant.",
		}),
		tenantOpens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_pusher_tsdb_tenant_opens_total",
			Help: "Tenant TSDBs opened.",
		}),
		tenantOpenFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_pusher_tsdb_tenant_open_failures_total",
			Help: "Failed attempts to open a tenant TSDB.",
		}),
		tenantCloses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_pusher_tsdb_tenant_closes_total",
			Help: "Tenant TSDBs closed, by reason (idle, query: opened by reads only and closed when they ended, or shutdown).",
		}, []string{"reason"}),
		capacityRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_pusher_tsdb_capacity_refusals_total",
			Help: "Writes answered SERVER_ERROR because the pusher has no room for their tenant now, by cause (tenant_limit: -pusher.max-tenants tenants are open); the consumer retries them and skips nothing.",
		}, []string{"cause"}),
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ferry_pusher_tsdb_sync_duration_seconds",
			Help:    "Duration of Sync calls that fsync the WAL of every open tenant.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
		}),
		syncFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_pusher_tsdb_sync_failures_total",
			Help: "Sync calls that failed.",
		}),
		storageLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_pusher_tsdb_storage_lost_total",
			Help: "Times an open tenant's directory, WAL or the storage root was found vanished or replaced; the tenant answers SERVER_ERROR and Sync fails until it is recovered.",
		}),
		recoveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_pusher_tsdb_recoveries_total",
			Help: "Attempts to reopen a tenant whose storage was lost with the data of its in-memory head, by result (ok or failed).",
		}, []string{"result"}),
		writebackFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_pusher_tsdb_writeback_failures_total",
			Help: "Tenants whose storage failed to write back (a failed fsync, or a failed close before a Sync); each answers SERVER_ERROR and every Sync fails until the pusher is restarted.",
		}),
	}
	m.tsdb = newTSDBMetrics(func(id string) bool { return s.tenants.isOpen(id) })
	// Reported from 0, so that an alert on its rate sees the first refusal.
	m.capacityRefusals.WithLabelValues(capacityTenantLimit)
	return m
}

// register registers the metrics on reg unless it is nil. The collectors
// read s's open tenants at scrape time: s must be complete.
func (m *metrics) register(reg prometheus.Registerer, s *Store) {
	if reg == nil {
		return
	}
	reg.MustRegister(
		m.samplesAccepted, m.samplesRejected, m.replaysAccepted, m.exemplarsDropped,
		m.metadataDropped, m.tenantOpens, m.tenantOpenFailures, m.tenantCloses, m.capacityRefusals,
		m.syncDuration, m.syncFailures, m.storageLost, m.recoveries, m.writebackFailures, &tenantCollector{s: s}, tsdbCollector{m.tsdb},
	)
}

var (
	openTenantsDesc = prometheus.NewDesc("ferry_pusher_tsdb_open_tenants",
		"Tenant TSDBs currently open.", nil, nil)
	headSeriesDesc = prometheus.NewDesc("ferry_pusher_tsdb_head_series",
		"In-memory series of an open tenant TSDB, the number -limits.max-series-per-tenant applies to; only for the -storage.metrics-top-tenants tenants with the most.", []string{"tenant"}, nil)
	allHeadSeriesDesc = prometheus.NewDesc("ferry_pusher_tsdb_head_series_all_tenants",
		"In-memory series of all open tenant TSDBs together.", nil, nil)
)

// tenantCollector reports per-tenant gauges at scrape time, so a tenant's
// series disappear from /metrics when its TSDB is closed instead of lingering
// as stale values.
type tenantCollector struct{ s *Store }

func (c *tenantCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- openTenantsDesc
	ch <- headSeriesDesc
	ch <- allHeadSeriesDesc
}

func (c *tenantCollector) Collect(ch chan<- prometheus.Metric) {
	open := c.s.openTenantStats()
	ch <- prometheus.MustNewConstMetric(openTenantsDesc, prometheus.GaugeValue, float64(len(open)))
	var all uint64
	for _, t := range open {
		all += t.headSeries
	}
	ch <- prometheus.MustNewConstMetric(allHeadSeriesDesc, prometheus.GaugeValue, float64(all))
	for _, t := range largest(open, c.s.cfg.MetricsTopTenants) {
		ch <- prometheus.MustNewConstMetric(headSeriesDesc, prometheus.GaugeValue, float64(t.headSeries), t.tenant)
	}
}

// largest returns the n tenants with the most head series, ties broken by
// name so that a scrape's choice is stable.
func largest(stats []tenantStat, n int) []tenantStat {
	slices.SortFunc(stats, func(a, b tenantStat) int {
		if c := cmp.Compare(b.headSeries, a.headSeries); c != 0 {
			return c
		}
		return strings.Compare(a.tenant, b.tenant)
	})
	return stats[:min(n, len(stats))]
}
