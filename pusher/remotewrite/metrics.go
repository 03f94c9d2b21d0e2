package remotewrite

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the backend's own: what the receiver answered, how fast,
// and how often the pusher told a consumer to retry because of it.
type metrics struct {
	requests *prometheus.CounterVec
	samples  *prometheus.CounterVec
	duration prometheus.Histogram
	bytes    prometheus.Counter
	retries  prometheus.Counter
}

// Values of the code label for requests that got no HTTP answer.
const (
	codeTimeout = "timeout"
	codeError   = "error"
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_pusher_remote_write_requests_total",
			Help: "Requests sent to the remote-write receiver, by the receiver's HTTP status code ('timeout' or 'error' when it gave none).",
		}, []string{"code"}),
		samples: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_pusher_remote_write_samples_total",
			Help: "Samples, histogram samples and exemplars sent to the remote-write receiver, by the status code of the request that carried them.",
		}, []string{"code"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ferry_pusher_remote_write_request_duration_seconds",
			Help:    "Time from sending a request to the remote-write receiver to having read its answer.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_pusher_remote_write_sent_bytes_total",
			Help: "Snappy-compressed request bytes sent to the remote-write receiver.",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ferry_pusher_remote_write_retries_signalled_total",
			Help: "Requests answered SERVER_ERROR because of the receiver (429, 5xx, redirect, timeout, connection error): the consumer sends each again.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.samples, m.duration, m.bytes, m.retries} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("remote write: register metrics: %w", err)
		}
	}
	return m, nil
}

// codeOf is the code label of one request's outcome.
func codeOf(status int, err error) string {
	switch {
	case err == nil:
		return strconv.Itoa(status)
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return codeTimeout
	default:
		return codeError
	}
}
