package main

// The dev mode runs Ferry's whole pipeline in one process: an in-process
// Kafka (kfake), a pusher, one consumer per partition, the remote-write
// gateway and a demo producer.
// It is what `make run` starts. It lives beside its main, not in internal/:
// it wires the services' apps together, and nothing below services/ may
// import them.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	consumerapp "github.com/ferrylabs/ferry/consumer/app"
	gatewayapp "github.com/ferrylabs/ferry/gateway/app"
	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/internal/logging"
	pusherapp "github.com/ferrylabs/ferry/pusher/app"
)

// devConfig is the dev mode's configuration.
type devConfig struct {
	Partitions     int
	Tenants        int
	Rate           int
	Series         int
	StatusInterval time.Duration
	Duration       time.Duration
	ConsumerPort   int
	GatewayAddress string
	Pusher         pusherapp.Config
	Log            logging.Config
}

// RegisterFlags registers the dev mode's flags, the pusher's among them.
func (c *devConfig) RegisterFlags(f *flag.FlagSet) {
	f.IntVar(&c.Partitions, "partitions", 4, "Partitions of the in-process topic, and consumers (one per partition).")
	f.IntVar(&c.Tenants, "tenants", 8, "Tenants of the demo load.")
	f.IntVar(&c.Rate, "rate", 200, "Demo records per second, over all tenants.")
	f.IntVar(&c.Series, "series", 20, "Series per demo record.")
	f.DurationVar(&c.StatusInterval, "status-interval", 5*time.Second, "How often the status line is printed.")
	f.DurationVar(&c.Duration, "duration", 0, "Stop by itself after this long (0: run until Ctrl-C).")
	f.IntVar(&c.ConsumerPort, "consumer.http-base-port", 8180, "HTTP port of consumer-0 (status page, /metrics, /ready); consumer-N gets this port plus N. 0 picks free ports.")
	f.StringVar(&c.GatewayAddress, "gateway.http-listen-address", ":8090", "Address of the remote-write gateway: point a Prometheus's remote_write at http://<it>/api/v1/push. Requests without X-Scope-OrgID go to tenant "+devTenant+".")
	// The pusher's own flags, with the dev-mode logging shared.
	c.Pusher.RegisterFlags(f)
}

// Validate reports the first invalid setting, naming its flag.
func (c *devConfig) Validate() error {
	for _, v := range []struct {
		flag  string
		value int
	}{{"-partitions", c.Partitions}, {"-tenants", c.Tenants}, {"-rate", c.Rate}, {"-series", c.Series}} {
		if v.value <= 0 {
			return fmt.Errorf("%s must be positive, got %d", v.flag, v.value)
		}
	}
	if c.StatusInterval <= 0 {
		return fmt.Errorf("-status-interval must be positive, got %s", c.StatusInterval)
	}
	if c.ConsumerPort < 0 || c.ConsumerPort > 65535-c.Partitions {
		return fmt.Errorf("-consumer.http-base-port must be 0 or a port that leaves room for -partitions=%d consumers, got %d", c.Partitions, c.ConsumerPort)
	}
	if c.Duration < 0 {
		return fmt.Errorf("-duration must not be negative, got %s", c.Duration)
	}
	return c.Pusher.Validate()
}

const topic = "ingest"

// devTenant is the gateway's tenant for remote-write clients that send no
// X-Scope-OrgID header (Prometheus sends none unless configured to).
const devTenant = "dev"

// run runs the pipeline until ctx is done, printing status lines to out
// and logs to logOut, then stops it in order: producer, consumers (with
// their final commit), pusher, Kafka.
func run(ctx context.Context, cfg devConfig, out, logOut io.Writer) error {
	logger := cfg.Pusher.Log.New(logOut)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(cfg.Partitions), topic)) //nolint:gosec // validated small
	if err != nil {
		return fmt.Errorf("start in-process kafka: %w", err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()

	pusher, err := pusherapp.Start(cfg.Pusher, logger.With("component", "pusher"))
	if err != nil {
		return err
	}
	pusherCtx, stopPusher := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPusher()
	pusherDone := make(chan error, 1)
	go func() { pusherDone <- pusher.Run(pusherCtx) }()

	consumers, err := startConsumers(cfg, brokers, pusher.GRPCAddr(), logger)
	if err != nil {
		stopPusher()
		return errors.Join(err, <-pusherDone)
	}
	var consumersWG sync.WaitGroup
	consumerErrs := make(chan error, len(consumers))
	for _, c := range consumers {
		consumersWG.Go(func() { consumerErrs <- c.Run(ctx) })
	}

	gateway, err := startGateway(cfg, brokers[0], logger)
	if err != nil {
		return err
	}
	gatewayDone := make(chan error, 1)
	go func() { gatewayDone <- gateway.Run(ctx) }()

	producer, err := newProducer(cfg, brokers)
	if err != nil {
		return err
	}
	defer producer.Client.Close()
	var producerWG sync.WaitGroup
	producerWG.Go(func() { _ = producer.Run(ctx) })

	fmt.Fprintf(out, "ferry dev mode: kafka %v (in-process kfake, topic %q, %d partitions), pusher gRPC %s, HTTP %s, %d consumers; Ctrl-C stops\n",
		brokers, topic, cfg.Partitions, pusher.GRPCAddr(), pusher.HTTPAddr(), len(consumers))
	pages := []string{"pusher http://" + dialable(pusher.HTTPAddr()) + "/"}
	for i, c := range consumers {
		pages = append(pages, fmt.Sprintf("consumer-%d http://%s/", i, dialable(c.HTTPAddr())))
	}
	fmt.Fprintf(out, "status pages: %s\n", strings.Join(pages, ", "))
	if cfg.Pusher.Backend == pusherapp.BackendTSDB {
		fmt.Fprintf(out, "storing in %s; query it with:\n  curl -sG -H 'X-Scope-OrgID: %s' http://%s/api/v1/query --data-urlencode 'query=sum(count_over_time(ferry_demo_value[1m]))'\n",
			cfg.Pusher.TSDB.Path, loadgen.Tenant(0), dialable(pusher.HTTPAddr()))
	}
	fmt.Fprintf(out, "remote write into Ferry through the gateway on %s; in prometheus.yml:\n  remote_write:\n    - url: http://%s/api/v1/push\n      headers: {X-Scope-OrgID: my-tenant}   # without it: tenant %q\n",
		gateway.HTTPAddr(), dialable(gateway.HTTPAddr()), devTenant)
	statusLoop(ctx, cfg.StatusInterval, out, producer, consumers)

	producerWG.Wait()
	gatewayErr := <-gatewayDone
	consumersWG.Wait()
	close(consumerErrs)
	errs := []error{gatewayErr}
	for err := range consumerErrs {
		errs = append(errs, err)
	}
	printStatus(out, "final", producer, consumers)
	stopPusher()
	errs = append(errs, <-pusherDone)
	return errors.Join(errs...)
}

func startConsumers(cfg devConfig, brokers []string, pusherAddr string, logger *slog.Logger) ([]*consumerapp.Process, error) {
	var out []*consumerapp.Process
	for i := range cfg.Partitions {
		var cc consumerapp.Config
		fs := flag.NewFlagSet("consumer", flag.ContinueOnError)
		cc.RegisterFlags(fs) // the defaults
		cc.Consumer.KafkaAddress = brokers[0]
		cc.Consumer.Topic = topic
		cc.Consumer.InstanceID = "consumer-" + strconv.Itoa(i)
		cc.Consumer.PusherAddress = pusherAddr
		cc.HTTPListenAddress = "127.0.0.1:0"
		if cfg.ConsumerPort > 0 {
			cc.HTTPListenAddress = "127.0.0.1:" + strconv.Itoa(cfg.ConsumerPort+i)
		}
		if err := cc.Validate(); err != nil {
			return nil, err
		}
		p, err := consumerapp.Start(cc, logger.With("component", cc.Consumer.InstanceID))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cc.Consumer.InstanceID, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// startGateway binds the remote-write gateway, producing into the
// in-process Kafka.
func startGateway(cfg devConfig, broker string, logger *slog.Logger) (*gatewayapp.Process, error) {
	var gc gatewayapp.Config
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	gc.RegisterFlags(fs) // the defaults
	gc.Gateway.KafkaAddress = broker
	gc.Gateway.Topic = topic
	gc.Gateway.DefaultTenant = devTenant
	gc.HTTPListenAddress = cfg.GatewayAddress
	if err := gc.Validate(); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	p, err := gatewayapp.Start(gc, logger.With("component", "gateway"))
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	return p, nil
}

func newProducer(cfg devConfig, brokers []string) (*loadgen.Producer, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return nil, fmt.Errorf("demo producer: %w", err)
	}
	return &loadgen.Producer{
		Client:  cl,
		Topic:   topic,
		Tenants: cfg.Tenants,
		Rate:    cfg.Rate,
		Shape:   loadgen.WallClockShape(cfg.Series, cfg.Tenants, cfg.Rate),
	}, nil
}

func statusLoop(ctx context.Context, every time.Duration, out io.Writer, p *loadgen.Producer, cs []*consumerapp.Process) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			printStatus(out, "status", p, cs)
		}
	}
}

func printStatus(out io.Writer, label string, p *loadgen.Producer, cs []*consumerapp.Process) {
	acks := map[string]int64{}
	committed := map[int32]int64{}
	var lag int64
	for _, c := range cs {
		s := c.Consumer.Stats()
		for k, v := range s.Acks {
			acks[k] += v
		}
		maps.Copy(committed, s.Committed)
		lag += s.Lag()
	}
	parts := slices.Sorted(maps.Keys(committed))
	offs := make([]string, len(parts))
	for i, part := range parts {
		offs[i] = fmt.Sprintf("p%d=%d", part, committed[part])
	}
	fmt.Fprintf(out, "%s: produced=%d pushed_ok=%d client_errors=%d server_errors=%d stream_errors=%d committed=[%s] lag=%d\n",
		label, p.Produced(), acks["ok"], acks["client_error"], acks["server_error"], acks["stream_error"], strings.Join(offs, " "), lag)
}

// dialable turns a listen address such as [::]:8081 into one a user can
// paste into curl, localhost:8081.
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}
