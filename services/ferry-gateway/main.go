// Command ferry-gateway is Ferry's remote-write front door: Prometheus (or
// any remote-write client) sends to it over HTTP, and it produces each
// request to Kafka for ferry-consumer, answering only once Kafka has it.
package main

import (
	"context"
	"os"

	"github.com/ferrylabs/ferry/gateway/app"
	"github.com/ferrylabs/ferry/internal/cli"
)

func main() {
	var cfg app.Config
	cli.Main("ferry-gateway", &cfg, func(ctx context.Context) error { return app.Run(ctx, cfg, os.Stderr) })
}
