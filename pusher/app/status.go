package app

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferrylabs/ferry/internal/statuspage"
	"github.com/ferrylabs/ferry/pusher/tsdbstore"
)

// maxStatusTenants bounds the tenants listed on the status page, so that a
// pusher with thousands of them still answers at once.
const maxStatusTenants = 500

// statusPage is what the pusher's HTTP port shows at /: readiness, the
// backend, and with the tsdb backend its tenants.
//
// With -auth.tenants-file set the page, like /metrics, stays open to the
// operators without credentials, so it names no more tenants than /metrics
// does: the -storage.metrics-top-tenants with the most series.
func (p *Process) statusPage(cfg Config) statuspage.Page {
	now := time.Now()
	ready := "yes"
	// The same check as /ready: the page must not say yes while the
	// storage cannot be written or the shared TSDB is being replayed.
	readyErr := p.ready()
	if readyErr != nil {
		ready = "no: " + readyErr.Error()
	}
	page := statuspage.Page{
		Title: "ferry-pusher",
		Facts: []statuspage.Fact{
			{Name: "ready", Value: ready, Bad: readyErr != nil},
			{Name: "backend", Value: cfg.Backend},
			{Name: "gRPC", Value: p.GRPCAddr()},
			// Whether series with UTF-8 names are taken, for an operator
			// who wonders why one was refused.
			{Name: "metric and label names", Value: cfg.Pusher.Limits.NameScheme().String() + " (-limits.name-validation-scheme)"},
		},
		Generated: now,
	}
	if store, ok := p.Backend.(*tsdbstore.Store); ok {
		limit := maxStatusTenants
		if cfg.Auth.Enabled() {
			limit = cfg.TSDB.MetricsTopTenants
		}
		page.Sections = append(page.Sections, tenantSection(store.TenantStatuses(now), limit, now))
	}
	return page
}

// tenantSection is the table of the TSDB's tenants, at most limit of them:
// the ones with the most series.
func tenantSection(tenants []tsdbstore.TenantStatus, limit int, now time.Time) statuspage.Section {
	sec := statuspage.Section{
		Title:   "Tenants",
		Note:    "series in memory (open tenants), samples appended per second since the page's previous look, storage on disk",
		Columns: []string{"tenant", "state", "series", "samples/s", "last write", "storage"},
		Empty:   "no tenant has written yet",
	}
	if len(tenants) > limit {
		sec.Note += fmt.Sprintf("; the %d of %d tenants with the most series", limit, len(tenants))
		slices.SortStableFunc(tenants, func(a, b tsdbstore.TenantStatus) int { return cmp.Compare(b.HeadSeries, a.HeadSeries) })
		tenants = tenants[:limit]
		slices.SortFunc(tenants, func(a, b tsdbstore.TenantStatus) int { return strings.Compare(a.Tenant, b.Tenant) })
	}
	for _, t := range tenants {
		state, series := "closed", "–"
		if t.Open {
			state, series = "open", strconv.FormatUint(t.HeadSeries, 10)
		}
		rate := "–"
		if t.SamplesPerSecond >= 0 {
			rate = strconv.FormatFloat(t.SamplesPerSecond, 'f', 1, 64)
		}
		last := "–"
		if !t.LastWrite.IsZero() {
			last = statuspage.Age(now.Sub(t.LastWrite)) + " ago"
		}
		storage := "in the shared TSDB" // -storage.tenancy=shared
		if t.StorageBytes >= 0 {
			storage = statuspage.Bytes(t.StorageBytes)
		}
		sec.Rows = append(sec.Rows, statuspage.Row{Cells: []string{t.Tenant, state, series, rate, last, storage}})
	}
	return sec
}
