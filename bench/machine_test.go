package main

import "testing"

func TestCPUSharesSeparatesStealFromBusy(t *testing.T) {
	from := cpuTimes{total: 1000, idle: 400, steal: 10}
	// 1,000 ticks later: 300 idle, 50 stolen, so 650 busy.
	to := cpuTimes{total: 2000, idle: 700, steal: 60}
	if got, want := cpuShares(from, to), "65% busy, 5.0% stolen"; got != want {
		t.Errorf("cpuShares = %q, want %q", got, want)
	}
	if got := cpuShares(to, to); got != "unknown" {
		t.Errorf("cpuShares over no time = %q, want unknown", got)
	}
}

func TestReadCPUTimesAddsUp(t *testing.T) {
	c, ok := readCPUTimes()
	if !ok {
		t.Skip("no /proc/stat here")
	}
	if c.total == 0 || c.idle > c.total || c.steal > c.total {
		t.Errorf("implausible CPU times %+v", c)
	}
}

func TestReferenceWorkDecodes(t *testing.T) {
	if referenceWork(10, 1) <= 0 {
		t.Error("the reference work failed to decode its request")
	}
}
