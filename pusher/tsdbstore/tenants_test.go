package tsdbstore

import "testing"

// TestIsolationFollowsTheConfig: a tenant's TSDB runs with isolation only
// under -storage.isolation. The TSDB gives each appender an append ID only
// with isolation on, and its high watermark gauge is the last one given
// out, so after one push it is 1 with isolation and 0 without.
func TestIsolationFollowsTheConfig(t *testing.T) {
	if DefaultConfig().Isolation {
		t.Fatal("-storage.isolation defaults to true")
	}
	for _, tc := range []struct {
		isolation bool
		want      float64
	}{{false, 0}, {true, 1}} {
		s := newTestStore(t, func(c *Config) { c.Isolation = tc.isolation })
		s.metrics.tsdb.keepAll = true
		mustPush(t, s, "t", floatReq(base, 1))
		if got := tsdbGauge(t, s, "t", "prometheus_tsdb_isolation_high_watermark"); got != tc.want {
			t.Errorf("isolation %v: the TSDB gave out %v append IDs for one push, want %v", tc.isolation, got, tc.want)
		}
	}
}
