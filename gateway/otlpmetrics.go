package gateway

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/genproto/googleapis/rpc/code"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// otlpMetrics are the metrics of the OTLP endpoints, beside the gateway's
// own: what a request became is counted by the shared counters too
// (series, samples, records, rejected requests by reason).
type otlpMetrics struct {
	requests *prometheus.CounterVec
	points   prometheus.Counter
	rejected *prometheus.CounterVec
	warnings *prometheus.CounterVec
}

func newOTLPMetrics(reg prometheus.Registerer) *otlpMetrics {
	a := promauto.With(reg)
	return &otlpMetrics{
		requests: a.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_gateway_otlp_requests_total",
			Help: "OTLP/HTTP metrics exports answered, by HTTP status code and how the tenant was named (header, default, none).",
		}, []string{"status", "tenant_class"}),
		points: a.NewCounter(prometheus.CounterOpts{
			Name: "ferry_gateway_otlp_received_data_points_total",
			Help: "OTLP data points in exports decoded, accepted or not.",
		}),
		rejected: a.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_gateway_otlp_rejected_data_points_total",
			Help: "Data points refused in exports otherwise accepted and answered with partial_success, by reason: delta_temporality (OTLP points of delta sums and histograms), invalid_series (Prometheus samples the pusher's checks would refuse).",
		}, []string{"reason"}),
		warnings: a.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_gateway_otlp_translation_warnings_total",
			Help: "Warnings of Prometheus's OTLP translator, by category (as prometheus_api_otlp_translation_warnings_total counts them).",
		}, []string{"category"}),
	}
}

// writeOTLPStatus writes an error answer: a google.rpc.Status in the
// request's encoding, as the OTLP/HTTP specification asks.
func writeOTLPStatus(w http.ResponseWriter, enc string, status int, msg string) {
	st := &spb.Status{Code: int32(rpcCode(status)), Message: msg}
	var b []byte
	var err error
	if enc == otlpJSON {
		b, err = protojson.Marshal(st)
	} else {
		b, err = proto.Marshal(st)
	}
	if err != nil {
		http.Error(w, msg, status)
		return
	}
	w.Header().Set("Content-Type", enc)
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// rpcCode is the google.rpc.Code of an HTTP status, as google.rpc's
// mapping pairs them.
func rpcCode(status int) code.Code {
	switch status {
	case http.StatusBadRequest, http.StatusUnsupportedMediaType:
		return code.Code_INVALID_ARGUMENT
	case http.StatusUnauthorized:
		return code.Code_UNAUTHENTICATED
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		return code.Code_RESOURCE_EXHAUSTED
	case http.StatusServiceUnavailable:
		return code.Code_UNAVAILABLE
	}
	return code.Code_INTERNAL
}
