package tsdbstore

import (
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// TestHeadSeriesNamesOnlyTheLargestTenants writes tenant-i with i series
// and expects only the two largest in the tenant label, the total of all.
func TestHeadSeriesNamesOnlyTheLargestTenants(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	cfg := DefaultConfig()
	cfg.Path = t.TempDir()
	cfg.IdleTimeout = 0
	cfg.MetricsTopTenants = 2
	s, err := New(cfg, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 1; i <= 4; i++ {
		var ts []prompb.TimeSeries
		for j := range i {
			ts = append(ts, floats(lbls("__name__", "x", "j", strconv.Itoa(j)), float64(base), 1))
		}
		mustPush(t, s, "tenant-"+strconv.Itoa(i), &prompb.WriteRequest{Timeseries: ts})
	}
	want := `
# HELP ferry_pusher_tsdb_head_series In-memory series of an open tenant TSDB, the number -limits.max-series-per-tenant applies to; only for the -storage.metrics-top-tenants tenants with the most.
# TYPE ferry_pusher_tsdb_head_series gauge
ferry_pusher_tsdb_head_series{tenant="tenant-3"} 3
ferry_pusher_tsdb_head_series{tenant="tenant-4"} 4
# HELP ferry_pusher_tsdb_head_series_all_tenants In-memory series of all open tenant TSDBs together.
# TYPE ferry_pusher_tsdb_head_series_all_tenants gauge
ferry_pusher_tsdb_head_series_all_tenants 10
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ferry_pusher_tsdb_head_series", "ferry_pusher_tsdb_head_series_all_tenants"); err != nil {
		t.Fatal(err)
	}
}
