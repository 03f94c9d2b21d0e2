package pusher

import (
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

type metrics struct {
	requests     *prometheus.CounterVec
	samples      *prometheus.CounterVec
	duration     prometheus.Histogram
	inflight     prometheus.Gauge
	syncDuration prometheus.Histogram
	// batchRequests is the number of requests per apply of a stream's
	// sequenced requests of one tenant.
	batchRequests prometheus.Histogram

	pendingRequests prometheus.Gauge
	pendingBytes    prometheus.Gauge
	// grpc counts and times every call of the gRPC server, health and
	// reflection included, by method and code.
	grpc *grpcprom.ServerMetrics
	// transport shows the gRPC server's connection and stream gates.
	transport *transportMetrics
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	grpcMetrics := grpcprom.NewServerMetrics(
		grpcprom.WithServerCounterOptions(grpcprom.WithNamespace("ferry_pusher")),
		grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramNamespace("ferry_pusher")),
	)
	if reg != nil {
		reg.MustRegister(grpcMetrics)
	}
	return &metrics{
		grpc:      grpcMetrics,
		transport: newTransportMetrics(f),
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_pusher_requests_total",
			Help: "Requests answered, by acknowledgement status (ok, client_error, server_error).",
		}, []string{"status"}),
		samples: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_pusher_samples_total",
			Help: "Samples, histogram samples and exemplars, by outcome (accepted, rejected).",
		}, []string{"outcome"}),
		duration: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "ferry_pusher_request_duration_seconds",
			Help:    "Time to validate and apply one request.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 9),
		}),
		inflight: f.NewGauge(prometheus.GaugeOpts{
			Name: "ferry_pusher_inflight_requests",
			Help: "Requests being applied now.",
		}),
		syncDuration: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "ferry_pusher_sync_duration_seconds",
			Help:    "Time of Sync calls (flush and fsync of the storage).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
		}),
		batchRequests: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "ferry_pusher_batch_requests",
			Help:    "Sequenced requests of a tenant applied together in one call (one commit with the tsdb backend); always 1 for backends that apply requests one by one.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
		}),
		pendingRequests: f.NewGauge(prometheus.GaugeOpts{
			Name: "ferry_pusher_pending_requests",
			Help: "Requests received and not yet answered, on all streams and PushOne calls.",
		}),
		pendingBytes: f.NewGauge(prometheus.GaugeOpts{
			Name: "ferry_pusher_pending_bytes",
			Help: "Bytes counted against -pusher.max-pending-bytes: requests received and not yet answered, each its size plus 8 KiB.",
		}),
	}
}

// statusLabel is the metric label of an acknowledgement status.
func statusLabel(s ferryv1.AckStatus) string {
	switch s {
	case ferryv1.AckStatus_ACK_STATUS_OK:
		return "ok"
	case ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR:
		return "client_error"
	case ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR:
		return "server_error"
	default:
		return "unspecified"
	}
}

func (m *metrics) observe(resp *ferryv1.PushResponse, d time.Duration) {
	m.requests.WithLabelValues(statusLabel(resp.Status)).Inc()
	m.samples.WithLabelValues("accepted").Add(float64(resp.AcceptedSamples))
	m.samples.WithLabelValues("rejected").Add(float64(resp.RejectedSamples))
	m.duration.Observe(d.Seconds())
}
