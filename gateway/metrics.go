package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Tenant classes, the tenant_class label of the request counter: per-tenant
// labels would let any client create series at will.
const (
	classHeader  = "header"
	classDefault = "default"
	classNone    = "none"
)

// metrics are the gateway's Prometheus metrics.
type metrics struct {
	requests        *prometheus.CounterVec
	samples         prometheus.Counter
	histograms      prometheus.Counter
	exemplars       prometheus.Counter
	series          prometheus.Counter
	bytes           *prometheus.CounterVec
	records         prometheus.Counter
	produceDuration prometheus.Histogram
	splitRequests   prometheus.Counter
	rejected        *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, f *inflight) *metrics {
	a := promauto.With(reg)
	m := &metrics{
		requests: a.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_gateway_requests_total",
			Help: "Remote-write requests answered, by HTTP status code and how the tenant was named (header, default, none).",
		}, []string{"status", "tenant_class"}),
		samples: a.NewCounter(prometheus.CounterOpts{
			Name: "ferry_gateway_received_samples_total",
			Help: "Float samples in requests decoded, accepted or not.",
		}),
		histograms: a.NewCounter(prometheus.CounterOpts{
			Name: "ferry_gateway_received_histograms_total",
			Help: "Native histogram samples in requests decoded, accepted or not.",
		}),
		exemplars: a.NewCounter(prometheus.CounterOpts{
			Name: "ferry_gateway_received_exemplars_total",
			Help: "Exemplars in requests decoded, accepted or not.",
		}),
		series: a.NewCounter(prometheus.CounterOpts{
			Name: "ferry_gateway_received_series_total",
			Help: "Series in requests decoded, accepted or not.",
		}),
		bytes: a.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_gateway_received_bytes_total",
			Help: "Bytes of request bodies read, as sent (encoding=snappy) and decompressed (encoding=none).",
		}, []string{"encoding"}),
		records: a.NewCounter(prometheus.CounterOpts{
			Name: "ferry_gateway_records_produced_total",
			Help: "Records Kafka acknowledged.",
		}),
		produceDuration: a.NewHistogram(prometheus.HistogramOpts{
			Name:    "ferry_gateway_produce_duration_seconds",
			Help:    "Time from handing a request's records to the producer until Kafka acknowledged all of them, or the produce failed.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		splitRequests: a.NewCounter(prometheus.CounterOpts{
			Name: "ferry_gateway_split_requests_total",
			Help: "Requests larger than -gateway.max-record-bytes, produced as several records.",
		}),
		rejected: a.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_gateway_rejected_requests_total",
			Help: "Requests answered with an error, by reason.",
		}, []string{"reason"}),
	}
	a.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ferry_gateway_inflight_bytes",
		Help: "Bytes of requests being decoded or produced now, bounded by -gateway.max-inflight-bytes.",
	}, func() float64 { return float64(f.bytes()) })
	return m
}
