package app

import (
	"fmt"
	"os"
	"runtime"
)

// usableProcs is Go's own GOMAXPROCS, taken before MaxProcs changes it:
// the CPUs the process may use (cgroup limits included).
var usableProcs = runtime.GOMAXPROCS(0)

// MaxProcs sets GOMAXPROCS of a ferry-consumer process from
// -consumer.max-procs and returns what it set; 0 when the GOMAXPROCS
// environment variable is set, which wins. Only the ferry-consumer command
// calls it: a process that runs consumers beside other services (ferry-dev,
// the integration tests) keeps Go's default.
//
// The default, one per partition the consumer reads and at most the usable
// CPUs, is for small records: a record passes between five goroutines
// (fetch, validation, its lane, the stream's writer and receiver), and with
// a second processor idle each hand-off woke a thread to run the next
// goroutine, which soon slept again. With one processor per partition the
// hand-offs stay on one thread (docs/benchmarks.md, "Consumer CPU per
// record", has the measurements and their spread).
func MaxProcs(cfg Config) (int, error) {
	if os.Getenv("GOMAXPROCS") != "" {
		return 0, nil
	}
	n := cfg.MaxProcs
	if n == 0 {
		owned, err := cfg.Consumer.OwnedPartitions()
		if err != nil {
			return 0, err
		}
		n = min(len(owned), usableProcs)
	}
	if n < 1 {
		return 0, fmt.Errorf("-consumer.max-procs must not be negative, got %d", cfg.MaxProcs)
	}
	runtime.GOMAXPROCS(n)
	return n, nil
}
