package tsdbstore

import (
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// tsdbMetrics sums the TSDBs' own metrics over tenants. Each tenant's DB
// registers its metrics on a registry of its own (one DB per registry:
// they all use the same names); a scrape gathers them and reports, under
// ferry_ names and without a tenant label, the sum of a chosen few, so
// /metrics does not grow with the tenants.
//
// A closed DB's registry would keep its head in memory through the
// head's gauge functions. At every scrape, and when a tenant opens again,
// the counters of a tenant that is no longer open are folded into retired
// totals and its registry is dropped, so the sums never go backwards.
type tsdbMetrics struct {
	// isOpen reports whether the tenant is open or opening.
	isOpen func(tenant string) bool

	mu   sync.Mutex
	live map[string]*prometheus.Registry
	// retired are the counters of closed DBs, by series (name and labels),
	// and retiredSamples the appended samples of each closed tenant.
	retired        map[string]*aggSeries
	retiredSamples map[string]float64

	// rates turns the samples appended into rates for the status page.
	rates rateSampler

	// keepAll registers every metric of a tenant's TSDB, not only the
	// summed ones: for tests that read a TSDB's own metrics.
	keepAll bool
}

// aggregated are the TSDB metrics summed over tenants, keyed by the TSDB's
// name, with the name and help Ferry exports them under.
var aggregated = map[string]exported{}

// exported is a TSDB metric's name and help under Ferry.
type exported struct{ name, help string }

func init() {
	for _, m := range []struct{ from, to, help string }{
		{"prometheus_tsdb_head_samples_appended_total", "ferry_pusher_tsdb_head_samples_appended_total", "Samples appended to the TSDB heads of all tenants, by type."},
		{"prometheus_tsdb_head_series_created_total", "ferry_pusher_tsdb_head_series_created_total", "Series created in the TSDB heads of all tenants."},
		{"prometheus_tsdb_out_of_order_samples_total", "ferry_pusher_tsdb_out_of_order_samples_total", "Samples the TSDBs of all tenants refused as out of order, by type."},
		{"prometheus_tsdb_too_old_samples_total", "ferry_pusher_tsdb_too_old_samples_total", "Samples the TSDBs of all tenants refused as older than the head allows, by type."},
		{"prometheus_tsdb_out_of_bound_samples_total", "ferry_pusher_tsdb_out_of_bound_samples_total", "Samples the TSDBs of all tenants refused as out of the head's time bounds, by type."},
		{"prometheus_tsdb_compactions_total", "ferry_pusher_tsdb_compactions_total", "Block compactions of all tenants' TSDBs."},
		{"prometheus_tsdb_compactions_failed_total", "ferry_pusher_tsdb_compactions_failed_total", "Failed block compactions of all tenants' TSDBs."},
		{"prometheus_tsdb_wal_corruptions_total", "ferry_pusher_tsdb_wal_corruptions_total", "WAL corruptions found (and repaired) when tenants' TSDBs opened."},
		{"prometheus_tsdb_wal_fsync_duration_seconds", "ferry_pusher_tsdb_wal_fsync_duration_seconds", "Duration of WAL fsyncs, all tenants' TSDBs together (count and sum only: quantiles do not add up)."},
	} {
		aggregated[m.from] = exported{m.to, m.help}
	}
}

// aggSeries is one summed series: a counter's value, or a summary's count
// and sum.
type aggSeries struct {
	name   string
	labels []*dto.LabelPair
	value  float64
	count  uint64
	sum    float64
}

func newTSDBMetrics(isOpen func(string) bool) *tsdbMetrics {
	return &tsdbMetrics{
		isOpen:         isOpen,
		live:           map[string]*prometheus.Registry{},
		retired:        map[string]*aggSeries{},
		retiredSamples: map[string]float64{},
	}
}

// registerer returns a fresh registry for a DB of tenant about to open,
// folding the registry of its previous DB into the retired totals. Only
// the collectors of the metrics Ferry sums are registered on it (see
// summedOnly).
func (m *tsdbMetrics) registerer(tenant string) prometheus.Registerer {
	reg := prometheus.NewRegistry()
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.live[tenant]; ok {
		m.retire(tenant, old)
	}
	m.live[tenant] = reg
	if m.keepAll {
		return reg
	}
	return summedOnly{reg}
}

// summedOnly registers on its registry only the collectors that describe
// a metric in aggregated, and accepts the rest without registering them.
// A TSDB registers about a hundred metrics, gauges that walk its head
// among them; a scrape gathered all of them for every open tenant to sum
// nine, which with 1,000 tenants cost about a CPU second per scrape.
type summedOnly struct{ reg *prometheus.Registry }

// Register registers c when it describes a summed metric.
func (s summedOnly) Register(c prometheus.Collector) error {
	if !describesSummed(c) {
		return nil
	}
	return s.reg.Register(c)
}

// MustRegister registers each of cs as Register does, and panics where
// prometheus.Registry.MustRegister would: the TSDB registers each metric
// once, on a registry of its own.
func (s summedOnly) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := s.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister unregisters c if it was registered.
func (s summedOnly) Unregister(c prometheus.Collector) bool { return s.reg.Unregister(c) }

// describesSummed reports whether one of c's descriptors is a summed
// metric's, or one whose name cannot be read (kept, to be safe).
func describesSummed(c prometheus.Collector) bool {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	keep := false
	for d := range ch { // drained to the end, so the goroutine ends
		name, ok := descName(d)
		if _, summed := aggregated[name]; summed || !ok {
			keep = true
		}
	}
	return keep
}

// descName reads a descriptor's metric name from its String form, the
// only place client_golang exposes it: `Desc{fqName: "name", ...`.
func descName(d *prometheus.Desc) (string, bool) {
	rest, ok := strings.CutPrefix(d.String(), "Desc{fqName: ")
	if !ok {
		return "", false
	}
	q, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return "", false
	}
	name, err := strconv.Unquote(q)
	return name, err == nil
}

// retire adds the counters of a closed DB's registry to the retired
// totals. m.mu is held.
func (m *tsdbMetrics) retire(tenant string, reg *prometheus.Registry) {
	mfs, _ := reg.Gather()
	add(m.retired, mfs)
	m.retiredSamples[tenant] += appended(mfs)
	delete(m.live, tenant)
}

// sums returns the aggregated series: the retired totals plus every live
// registry's, after retiring the tenants that closed.
func (m *tsdbMetrics) sums() map[string]*aggSeries {
	m.mu.Lock()
	defer m.mu.Unlock()
	for tenant, reg := range m.live {
		if !m.isOpen(tenant) {
			m.retire(tenant, reg)
		}
	}
	out := make(map[string]*aggSeries, len(m.retired))
	for k, s := range m.retired {
		c := *s
		out[k] = &c
	}
	for _, reg := range m.live {
		mfs, _ := reg.Gather()
		add(out, mfs)
	}
	return out
}

// samplesAppended returns the samples appended per tenant, open or closed
// since the process started.
func (m *tsdbMetrics) samplesAppended() map[string]float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]float64, len(m.retiredSamples)+len(m.live))
	for t, n := range m.retiredSamples {
		out[t] = n
	}
	for t, reg := range m.live {
		mfs, _ := reg.Gather()
		out[t] += appended(mfs)
	}
	return out
}

// appended is the samples of every type appended to one DB's head.
func appended(mfs []*dto.MetricFamily) float64 {
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "prometheus_tsdb_head_samples_appended_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// add sums the aggregated families of mfs into into.
func add(into map[string]*aggSeries, mfs []*dto.MetricFamily) {
	for _, mf := range mfs {
		if _, ok := aggregated[mf.GetName()]; !ok {
			continue
		}
		for _, mt := range mf.GetMetric() {
			key := seriesKey(mf.GetName(), mt.GetLabel())
			s := into[key]
			if s == nil {
				s = &aggSeries{name: mf.GetName(), labels: mt.GetLabel()}
				into[key] = s
			}
			switch {
			case mt.GetCounter() != nil:
				s.value += mt.GetCounter().GetValue()
			case mt.GetSummary() != nil:
				s.count += mt.GetSummary().GetSampleCount()
				s.sum += mt.GetSummary().GetSampleSum()
			}
		}
	}
}

func seriesKey(name string, labels []*dto.LabelPair) string {
	var b strings.Builder
	b.WriteString(name)
	for _, l := range labels {
		b.WriteString("\xff" + l.GetName() + "=" + l.GetValue())
	}
	return b.String()
}

// tsdbCollector exports the sums.
type tsdbCollector struct{ m *tsdbMetrics }

// Describe sends nothing: the label sets come from the TSDB's metrics, so
// the collector is unchecked.
func (tsdbCollector) Describe(chan<- *prometheus.Desc) {}

func (c tsdbCollector) Collect(ch chan<- prometheus.Metric) {
	sums := c.m.sums()
	keys := make([]string, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		s := sums[k]
		to := aggregated[s.name]
		names, values := make([]string, 0, len(s.labels)), make([]string, 0, len(s.labels))
		for _, l := range s.labels {
			names = append(names, l.GetName())
			values = append(values, l.GetValue())
		}
		desc := prometheus.NewDesc(to.name, to.help, names, nil)
		if strings.HasSuffix(s.name, "_seconds") {
			ch <- prometheus.MustNewConstSummary(desc, s.count, s.sum, nil, values...)
			continue
		}
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, s.value, values...)
	}
}
