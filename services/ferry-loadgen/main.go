// Command ferry-loadgen produces demo remote-write requests to a Kafka topic
// at a steady rate: the load of the docker-compose stack and of manual
// tests against a real Kafka.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/cli"
	"github.com/ferrylabs/ferry/internal/kafkaclient"
	"github.com/ferrylabs/ferry/internal/loadgen"
)

type config struct {
	address  string
	topic    string
	tenants  int
	rate     int
	series   int
	duration time.Duration
	kafka    kafkaclient.Config
}

// RegisterFlags registers the load generator's flags on f.
func (c *config) RegisterFlags(f *flag.FlagSet) {
	f.StringVar(&c.address, "kafka.address", "localhost:9092", "Kafka bootstrap brokers, comma-separated host:port.")
	f.StringVar(&c.topic, "kafka.topic", "ingest", "Topic to produce to; it must exist.")
	f.IntVar(&c.tenants, "tenants", 8, "Tenants (record keys) to spread the load over.")
	f.IntVar(&c.rate, "rate", 200, "Records per second, over all tenants.")
	f.IntVar(&c.series, "series", 20, "Series per record.")
	f.DurationVar(&c.duration, "duration", 0, "Stop after this long (0: until interrupted).")
	c.kafka.RegisterFlags(f)
}

// Validate reports the first invalid flag.
func (c *config) Validate() error {
	if strings.TrimSpace(c.address) == "" {
		return errors.New("-kafka.address must name at least one broker")
	}
	for _, v := range []struct {
		flag  string
		value int
	}{{"-tenants", c.tenants}, {"-rate", c.rate}, {"-series", c.series}} {
		if v.value <= 0 {
			return fmt.Errorf("%s must be positive, got %d", v.flag, v.value)
		}
	}
	if c.duration < 0 {
		return fmt.Errorf("-duration must not be negative, got %s", c.duration)
	}
	return c.kafka.Validate()
}

func main() {
	var cfg config
	cli.Main("ferry-loadgen", &cfg, func(ctx context.Context) error { return run(ctx, cfg) })
}

func run(ctx context.Context, cfg config) error {
	if cfg.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.duration)
		defer cancel()
	}
	opts, err := cfg.kafka.Opts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(strings.Split(cfg.address, ",")...), kgo.DefaultProduceTopic(cfg.topic))...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	p := &loadgen.Producer{
		Client:  cl,
		Topic:   cfg.topic,
		Tenants: cfg.tenants,
		Rate:    cfg.rate,
		Shape:   loadgen.WallClockShape(cfg.series, cfg.tenants, cfg.rate),
	}
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				fmt.Printf("produced=%d failed=%d\n", p.Produced(), p.Failed())
			}
		}
	}()
	err = p.Run(ctx)
	fmt.Printf("produced=%d failed=%d\n", p.Produced(), p.Failed())
	return err
}
