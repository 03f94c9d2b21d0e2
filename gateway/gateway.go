package gateway

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// Gateway is the remote-write handler with its producer and limits.
type Gateway struct {
	cfg      Config
	producer producer
	// shards places a sharded tenant's records; nil for a producer that
	// cannot, whose tenants all have shards of one partition.
	shards   shardProducer
	limiter  *tenantLimiter
	inflight *inflight
	metrics  *metrics
	otlp     *otlpMetrics
	logger   *slog.Logger

	// noScan turns off the path that forwards a request after one pass
	// (scan), so that tests can compare it with the path that decodes.
	noScan bool
}

// New builds a gateway producing to the Kafka of cfg. Close releases its
// client.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Gateway, error) {
	p, err := newKafkaProducer(cfg, logger)
	if err != nil {
		return nil, err
	}
	return newGateway(cfg, p, logger, reg), nil
}

func newGateway(cfg Config, p producer, logger *slog.Logger, reg prometheus.Registerer) *Gateway {
	f := &inflight{limit: cfg.MaxInflightBytes}
	shards, _ := p.(shardProducer)
	return &Gateway{
		cfg:      cfg,
		producer: p,
		shards:   shards,
		limiter:  newTenantLimiter(cfg.TenantRateLimit, cfg.TenantBurst),
		inflight: f,
		metrics:  newMetrics(reg, f),
		otlp:     newOTLPMetrics(reg),
		logger:   logger,
	}
}

// Register adds the remote-write endpoints to mux: /api/v1/push (the
// Mimir and Cortex path) and /api/v1/write (Prometheus's receiver path),
// and OTLP/HTTP metrics at /otlp/v1/metrics (Mimir's path, where an
// exporter's endpoint .../otlp leads) and /api/v1/otlp/v1/metrics
// (Prometheus's).
func (g *Gateway) Register(mux *http.ServeMux) {
	mux.Handle("POST /api/v1/push", g)
	mux.Handle("POST /api/v1/write", g)
	mux.HandleFunc("POST /otlp/v1/metrics", g.ServeOTLP)
	mux.HandleFunc("POST /api/v1/otlp/v1/metrics", g.ServeOTLP)
}

// Ready reports nil when the broker answers and knows the topic's
// partitions.
func (g *Gateway) Ready() error { return g.producer.ready(context.Background()) }

// Close closes the Kafka client; records not yet acknowledged fail, and
// their requests are answered 503.
func (g *Gateway) Close() { g.producer.close() }
