// Command ferry-dev runs the whole Ferry pipeline in one process for a
// first look: an in-process Kafka (kfake) with a 4-partition topic, a
// pusher, one consumer per partition and a demo producer, with a status line
// every few seconds. Ctrl-C stops everything with a final commit.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ferrylabs/ferry/internal/devmode"
)

func main() {
	var cfg devmode.Config
	fs := flag.NewFlagSet("ferry-dev", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "ferry-dev:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	if err := devmode.Run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ferry-dev:", err)
		os.Exit(1)
	}
}
