// Command bench is Ferry's end-to-end benchmark harness (`make bench`).
//
// In one run, on the same data and machine, it measures for each workload
// shape the raw Kafka consume ceiling, the consume+decode ceiling, and the
// pipeline through separate ferry-consumer and ferry-pusher processes with
// the discard and the tsdb backends; then produce-to-ack latency at half
// capacity, the consumer's peak RSS replaying a 1 GB backlog, a fairness
// check with one failing tenant, perf profiles of the pipeline and the Go
// micro-benchmarks. It prints markdown tables and writes them into
// docs/benchmarks.md. `go run ./bench -h` lists the flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := run(ctx, cfg, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
