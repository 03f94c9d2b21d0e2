// Command ferry-pusher is Ferry's push service: it receives write requests
// from ferry-consumer over gRPC, applies them to its backend and
// acknowledges each one.
package main

import (
	"context"
	"os"

	"github.com/ferrylabs/ferry/internal/cli"
	"github.com/ferrylabs/ferry/pusher/app"
)

func main() {
	var cfg app.Config
	cli.Main("ferry-pusher", &cfg, func(ctx context.Context) error { return app.Run(ctx, cfg, os.Stderr) })
}
