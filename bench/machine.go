package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/proto/wire"
)

// machine describes where the benchmark ran.
type machine struct {
	CPUs      int
	CPUModel  string
	MemTotal  string
	GoVersion string
	Kernel    string
	GOMAXPROC int
}

func readMachine() machine {
	m := machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), GOMAXPROC: runtime.GOMAXPROCS(0)}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		_ = f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && k == "MemTotal" {
				m.MemTotal = fmtBytes(parseKB(v))
				break
			}
		}
		_ = f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// loadAvg returns the 1, 5 and 15 minute load averages from /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// cpuTimes are the machine's CPU times from the first line of /proc/stat,
// in clock ticks summed over every CPU.
type cpuTimes struct {
	total, idle, steal uint64
}

// readCPUTimes returns the machine's CPU times so far; ok is false where
// /proc/stat cannot be read.
func readCPUTimes() (t cpuTimes, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return t, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	// cpu user nice system idle iowait irq softirq steal [guest guest_nice]:
	// guest time is already counted in user and nice.
	if len(f) < 9 || f[0] != "cpu" {
		return t, false
	}
	for i, s := range f[1:9] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return cpuTimes{}, false
		}
		t.total += v
		switch i {
		case 3, 4: // idle, iowait
			t.idle += v
		case 7:
			t.steal = v
		}
	}
	return t, true
}

// cpuShares describes the machine's CPU between two readings: how much of
// it was busy, and how much the hypervisor gave to other guests (steal),
// which no process's CPU time shows.
func cpuShares(from, to cpuTimes) string {
	if to.total <= from.total {
		return "unknown"
	}
	d := to.total - from.total
	busy := d - (to.idle - from.idle) - (to.steal - from.steal)
	return fmt.Sprintf("%.0f%% busy, %.1f%% stolen", 100*float64(busy)/float64(d), 100*float64(to.steal-from.steal)/float64(d))
}

// referenceWork times a fixed piece of single-threaded work, the median
// of repeats: decoding loadgen's (1,1,100) request n times with the
// pusher's decoder, which allocates nothing after the first, after a
// collection, so the harness's own heap does not show in it. On a machine
// shared with other guests the same code runs slower at busy times; the
// figure before each stage and at a run's start and end shows by how much.
func referenceWork(n, repeats int) time.Duration {
	value := loadgen.Shape{Series: 100, StartMs: 1, StepMs: 1}.Marshal(loadgen.Tenant(0), 0)
	var (
		d  wire.Decoder
		wr prompb.WriteRequest
	)
	runtime.GC()
	times := make([]time.Duration, repeats)
	for i := range times {
		start := time.Now()
		for range n {
			if err := d.Decode(value, &wr); err != nil {
				return 0
			}
		}
		times[i] = time.Since(start)
	}
	slices.Sort(times)
	return times[len(times)/2]
}
