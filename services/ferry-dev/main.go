// Command ferry-dev runs the whole Ferry pipeline in one process for a
// first look: an in-process Kafka (kfake) with a 4-partition topic, a
// pusher, one consumer per partition and a demo producer, with a status line
// every few seconds. Ctrl-C stops everything with a final commit.
package main

import (
	"context"
	"os"

	"github.com/ferrylabs/ferry/internal/cli"
)

func main() {
	var cfg devConfig
	cli.Main("ferry-dev", &cfg, func(ctx context.Context) error {
		if cfg.Duration > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
			defer cancel()
		}
		return run(ctx, cfg, os.Stdout, os.Stderr)
	})
}
