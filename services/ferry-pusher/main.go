// Command ferry-pusher is Ferry's push service: it receives write requests
// from ferry-consumer over gRPC, applies them to its backend and
// acknowledges each one.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ferrylabs/ferry/pusher/app"
)

func main() {
	var cfg app.Config
	fs := flag.NewFlagSet("ferry-pusher", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "ferry-pusher:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, cfg, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ferry-pusher:", err)
		os.Exit(1)
	}
}
