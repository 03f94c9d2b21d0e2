// Command ferry-consumer is Ferry's Kafka consumer: it reads its partitions,
// pushes every record to ferry-pusher over one gRPC stream and commits
// what was acknowledged.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ferrylabs/ferry/consumer/app"
)

func main() {
	var cfg app.Config
	fs := flag.NewFlagSet("ferry-consumer", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "ferry-consumer:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, cfg, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ferry-consumer:", err)
		os.Exit(1)
	}
}
