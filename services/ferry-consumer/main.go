// Command ferry-consumer is Ferry's Kafka consumer: it reads its partitions,
// pushes every record to ferry-pusher over one gRPC stream and commits
// what was acknowledged.
package main

import (
	"context"
	"os"

	"github.com/ferrylabs/ferry/consumer/app"
	"github.com/ferrylabs/ferry/internal/cli"
)

func main() {
	var cfg app.Config
	cli.Main("ferry-consumer", &cfg, func(ctx context.Context) error { return app.Run(ctx, cfg, os.Stderr) })
}
