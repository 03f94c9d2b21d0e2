package pusher

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// transportMetrics show the gRPC door's gates (connGate, streamGate): how
// full they are and what they turned away.
type transportMetrics struct {
	openStreams prometheus.Gauge
	handshaking prometheus.Gauge
	established prometheus.Gauge
	// Refusals by reason: a call beyond -grpc.max-open-streams, a stream
	// closed to make room for a newer one, a connection beyond
	// -grpc.max-connections, an idle one closed to make room, a connection
	// closed in its handshake to make room for a newer one.
	refusedStreams     prometheus.Counter
	staleStreams       prometheus.Counter
	refusedConnections prometheus.Counter
	idleConnections    prometheus.Counter
	evictedHandshakes  prometheus.Counter
}

func newTransportMetrics(f promauto.Factory) *transportMetrics {
	conns := f.NewGaugeVec(prometheus.GaugeOpts{
		Name: "ferry_pusher_grpc_connections",
		Help: "gRPC connections open, by state: handshake (TLS handshake or HTTP/2 preface not done) or established (counted against -grpc.max-connections).",
	}, []string{"state"})
	refused := f.NewCounterVec(prometheus.CounterOpts{
		Name: "ferry_pusher_grpc_refused_total",
		Help: "Calls and connections the gRPC server turned away, by reason: open_streams (-grpc.max-open-streams), stale_stream (closed for a newer one after a second without a message while the server was full), connections (-grpc.max-connections), idle_connection (closed for a newer one after a second without a call while the connections were full), handshake_evicted (closed in its handshake for a newer connection).",
	}, []string{"reason"})
	return &transportMetrics{
		openStreams: f.NewGauge(prometheus.GaugeOpts{
			Name: "ferry_pusher_grpc_open_streams",
			Help: "Calls and streams open on the gRPC server, counted against -grpc.max-open-streams.",
		}),
		handshaking:        conns.WithLabelValues("handshake"),
		established:        conns.WithLabelValues("established"),
		refusedStreams:     refused.WithLabelValues("open_streams"),
		staleStreams:       refused.WithLabelValues("stale_stream"),
		refusedConnections: refused.WithLabelValues("connections"),
		idleConnections:    refused.WithLabelValues("idle_connection"),
		evictedHandshakes:  refused.WithLabelValues("handshake_evicted"),
	}
}
