package pusher

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grpcMetrics counts and times every call of the gRPC server, health and
// reflection included, under the names and labels of go-grpc-middleware's
// Prometheus provider (grpc_server_started_total and the rest, by grpc_type,
// grpc_service, grpc_method and grpc_code), so that dashboards written for
// it work. It is ours for one reason: the provider looks up every series by
// its label values (hashing them under a lock) on every call and every
// stream message, five lookups per PushOne. Here each method's series are
// resolved once, when the server's methods are known (initialize), and a call
// finds them with one map read.
type grpcMetrics struct {
	started, handled, received, sent *prometheus.CounterVec
	handling                         *prometheus.HistogramVec

	// methods holds the series of every registered method by full method
	// name ("/service/method"), built by initialize and only read after.
	methods atomic.Pointer[map[string]*methodSeries]
}

// numCodes is the number of gRPC status codes, OK to Unauthenticated.
const numCodes = int(codes.Unauthenticated) + 1

// methodSeries is one method's series.
type methodSeries struct {
	started, received, sent prometheus.Counter
	handling                prometheus.Observer
	handled                 [numCodes]prometheus.Counter // by code
	labels                  [3]string                    // type, service, method
	handledVec              *prometheus.CounterVec       // for codes beyond the known ones
}

func newGRPCMetrics() *grpcMetrics {
	labels := []string{"grpc_type", "grpc_service", "grpc_method"}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "ferry_pusher", Name: name, Help: help}, labels)
	}
	return &grpcMetrics{
		started:  counter("grpc_server_started_total", "gRPC calls the server started.", labels...),
		handled:  counter("grpc_server_handled_total", "gRPC calls the server finished, by status code.", append(labels, "grpc_code")...),
		received: counter("grpc_server_msg_received_total", "gRPC messages the server received.", labels...),
		sent:     counter("grpc_server_msg_sent_total", "gRPC messages the server sent.", labels...),
		handling: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "ferry_pusher",
			Name:      "grpc_server_handling_seconds",
			Help:      "Time from the start to the end of gRPC calls on the server.",
			Buckets:   prometheus.DefBuckets,
		}, labels),
	}
}

// Describe implements prometheus.Collector.
func (m *grpcMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range []prometheus.Collector{m.started, m.handled, m.received, m.sent, m.handling} {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *grpcMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range []prometheus.Collector{m.started, m.handled, m.received, m.sent, m.handling} {
		c.Collect(ch)
	}
}

// initialize resolves the series of every method g serves, which reports
// each from zero before its first call.
func (m *grpcMetrics) initialize(g *grpc.Server) {
	methods := map[string]*methodSeries{}
	for service, info := range g.GetServiceInfo() {
		for _, method := range info.Methods {
			typ := "bidi_stream"
			switch {
			case !method.IsClientStream && !method.IsServerStream:
				typ = "unary"
			case method.IsClientStream && !method.IsServerStream:
				typ = "client_stream"
			case !method.IsClientStream && method.IsServerStream:
				typ = "server_stream"
			}
			methods["/"+service+"/"+method.Name] = m.resolve(typ, service, method.Name)
		}
	}
	m.methods.Store(&methods)
}

func (m *grpcMetrics) resolve(typ, service, method string) *methodSeries {
	s := &methodSeries{
		started:  m.started.WithLabelValues(typ, service, method),
		received: m.received.WithLabelValues(typ, service, method),
		sent:     m.sent.WithLabelValues(typ, service, method),
		handling: m.handling.WithLabelValues(typ, service, method),
		labels:   [3]string{typ, service, method},

		handledVec: m.handled,
	}
	for c := range s.handled {
		s.handled[c] = m.handled.WithLabelValues(typ, service, method, codes.Code(c).String())
	}
	return s
}

// series returns the series of the method fullMethod, of gRPC type typ.
// A method initialize did not see (gRPC runs interceptors only for
// registered methods: one registered after it) is resolved on every call.
func (m *grpcMetrics) series(fullMethod, typ string) *methodSeries {
	if methods := m.methods.Load(); methods != nil {
		if s, ok := (*methods)[fullMethod]; ok {
			return s
		}
	}
	service, method := splitMethod(fullMethod)
	return m.resolve(typ, service, method)
}

// splitMethod splits "/service/method".
func splitMethod(fullMethod string) (service, method string) {
	name := fullMethod
	if len(name) > 0 && name[0] == '/' {
		name = name[1:]
	}
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '/' {
			return name[:i], name[i+1:]
		}
	}
	return "unknown", "unknown"
}

// finish counts a call's end with its code and time.
func (s *methodSeries) finish(err error, start time.Time) {
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err) // as the gRPC server answers them
	}
	if c := int(st.Code()); c < numCodes {
		s.handled[c].Inc()
	} else {
		s.handledVec.WithLabelValues(s.labels[0], s.labels[1], s.labels[2], st.Code().String()).Inc()
	}
	s.handling.Observe(time.Since(start).Seconds())
}

// unary returns the interceptor counting unary calls.
func (m *grpcMetrics) unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		s := m.series(info.FullMethod, "unary")
		s.started.Inc()
		s.received.Inc()
		resp, err := handler(ctx, req)
		if err == nil {
			s.sent.Inc()
		}
		s.finish(err, start)
		return resp, err
	}
}

// stream returns the interceptor counting streams and their messages.
func (m *grpcMetrics) stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		typ := "bidi_stream"
		switch {
		case info.IsClientStream && !info.IsServerStream:
			typ = "client_stream"
		case !info.IsClientStream && info.IsServerStream:
			typ = "server_stream"
		}
		s := m.series(info.FullMethod, typ)
		s.started.Inc()
		err := handler(srv, countedStream{ServerStream: ss, s: s})
		s.finish(err, start)
		return err
	}
}

// countedStream counts a stream's messages.
type countedStream struct {
	grpc.ServerStream
	s *methodSeries
}

func (c countedStream) SendMsg(m any) error {
	err := c.ServerStream.SendMsg(m)
	if err == nil {
		c.s.sent.Inc()
	}
	return err
}

func (c countedStream) RecvMsg(m any) error {
	err := c.ServerStream.RecvMsg(m)
	if err == nil {
		c.s.received.Inc()
	}
	return err
}
