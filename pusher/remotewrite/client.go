package remotewrite

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// The headers of a remote-write 1.0 request.
const (
	contentEncoding   = "snappy"
	contentType       = "application/x-protobuf"
	remoteWriteHeader = "X-Prometheus-Remote-Write-Version"
	remoteWriteV1     = "0.1.0"
)

// Client is the remote-write backend: a backend.Backend that sends each
// request to the receiver as one remote-write 1.0 HTTP request and answers
// from the receiver's status code. It keeps nothing of a request after
// Push returns. Safe for concurrent use; the pusher's sequencer keeps each
// tenant's requests in order, so a tenant has one request in flight at a
// time, and different tenants go out concurrently.
type Client struct {
	url          string
	timeout      time.Duration
	tenantHeader string // "" sends no tenant
	headers      http.Header
	userAgent    string
	http         *http.Client
	metrics      *metrics
	now          func() time.Time
}

var _ backend.Backend = (*Client)(nil)

// New returns a backend sending to cfg.URL. It reads the secret and
// certificate files now, so a missing one fails at start-up, and again
// when they change, so that rotated secrets and certificates are used
// without a restart. Metrics are
// registered on reg, which may be nil.
func New(cfg Config, reg prometheus.Registerer) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rt, err := newRoundTripper(cfg)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	headers := cfg.Headers.Header()
	if headers == nil {
		headers = http.Header{}
	}
	c := &Client{
		url:       cfg.URL,
		timeout:   cfg.Timeout,
		headers:   headers,
		userAgent: "ferry/" + version(),
		http: &http.Client{
			Transport: rt,
			// A redirect is answered, not followed: see classify.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		metrics: m,
		now:     time.Now,
	}
	if cfg.SendTenant {
		c.tenantHeader = cfg.TenantHeader
	}
	return c, nil
}

// Push sends req. It encodes req again first, since the receiver needs the
// bytes: the server offers PushRaw, which skips that, whenever it has the
// bytes as received.
func (c *Client) Push(ctx context.Context, tenant string, req *prompb.WriteRequest) (backend.Result, error) {
	bp := marshalPool.Get().(*[]byte)
	defer marshalPool.Put(bp)
	size := req.Size()
	if cap(*bp) < size {
		*bp = make([]byte, size)
	}
	buf := (*bp)[:size]
	n, err := req.MarshalToSizedBuffer(buf)
	if err != nil {
		// A decoded request always encodes; failing is a bug, and a retry
		// is the answer that loses nothing.
		return backend.Result{}, &backend.ServerError{Reason: fmt.Sprintf("remote write: encode request: %v", err), Cause: err}
	}
	return c.send(ctx, tenant, backend.Count(req), buf[size-n:])
}

// PushRaw sends raw, an encoded WriteRequest of samples samples, exactly
// as the pusher received it. raw is read only until PushRaw returns.
func (c *Client) PushRaw(ctx context.Context, tenant string, raw []byte, samples int64) (backend.Result, error) {
	return c.send(ctx, tenant, samples, raw)
}

// marshalPool holds buffers for Push's encoding; they are only read by
// snappy before send returns, so reusing them is safe.
var marshalPool = sync.Pool{New: func() any { return new([]byte) }}

// send compresses and posts one encoded WriteRequest of n samples. The
// compressed body is a fresh slice each time, not a pooled one: the HTTP
// transport may still read a request body after Do returns (an answer
// that came before the body was written), so the body must never be
// reused.
func (c *Client) send(ctx context.Context, tenant string, n int64, encoded []byte) (backend.Result, error) {
	body, err := compress(encoded)
	if err != nil {
		return backend.Result{Rejected: n}, &backend.ClientError{Reason: fmt.Sprintf("remote write: %v", err)}
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return backend.Result{}, &backend.ServerError{Reason: fmt.Sprintf("remote write: build request: %v", err), Cause: err}
	}
	c.setHeaders(httpReq.Header, tenant)

	start := time.Now()
	resp, err := c.http.Do(httpReq)
	status := 0
	if err == nil {
		status = resp.StatusCode
	}
	outcome := classify(resp, err, c.now()) // reads and closes the body
	c.observe(codeOf(status, err), n, len(body), time.Since(start), outcome)
	if outcome == nil {
		return backend.Result{Accepted: n}, nil
	}
	if backend.IsClientError(outcome) {
		// The receiver refused the request as a whole: remote write 1.0
		// has no way to say which part, and the receivers we know apply
		// all or nothing.
		return backend.Result{Rejected: n}, outcome
	}
	return backend.Result{}, outcome
}

// compressPool holds scratch buffers of the worst-case compressed size.
var compressPool = sync.Pool{New: func() any { return new([]byte) }}

// compress returns encoded snappy-compressed in a fresh slice of exactly
// the compressed size. It compresses with s2's snappy-compatible fast
// mode, not klauspost's snappy.Encode, which is s2's "better" mode: on a
// pusher forwarding hundreds of megabytes a second the better mode was
// the largest single cost (a sixth of the pusher's CPU) for bodies about
// 10% smaller. BenchmarkSnappyEncode, 2,000 series: s2.EncodeSnappy 101
// µs, golang/snappy's Encode 163 µs, snappy.Encode 650 µs. The
// encoder wants room for the worst case (the input's size and more), so it
// writes into pooled scratch and only the result is copied out: a
// 500 KB request then allocates its 50 KB body, not 500 KB zeroed.
func compress(encoded []byte) ([]byte, error) {
	n := s2.MaxEncodedLen(len(encoded))
	if n < 0 {
		return nil, fmt.Errorf("request of %d bytes is too large for a snappy block", len(encoded))
	}
	sp := compressPool.Get().(*[]byte)
	defer compressPool.Put(sp)
	if cap(*sp) < n {
		*sp = make([]byte, n)
	}
	return bytes.Clone(s2.EncodeSnappy((*sp)[:cap(*sp)], encoded)), nil
}

func (c *Client) setHeaders(h http.Header, tenant string) {
	for name, values := range c.headers {
		h[name] = values
	}
	h.Set("Content-Encoding", contentEncoding)
	h.Set("Content-Type", contentType)
	h.Set(remoteWriteHeader, remoteWriteV1)
	h.Set("User-Agent", c.userAgent)
	if c.tenantHeader != "" {
		h.Set(c.tenantHeader, tenant)
	}
}

func (c *Client) observe(code string, n int64, size int, took time.Duration, outcome error) {
	c.metrics.requests.WithLabelValues(code).Inc()
	c.metrics.samples.WithLabelValues(code).Add(float64(n))
	c.metrics.duration.Observe(took.Seconds())
	c.metrics.bytes.Add(float64(size))
	if outcome != nil && !backend.IsClientError(outcome) {
		c.metrics.retries.Inc()
	}
}

// Sync has nothing to flush: Push returns OK only after the receiver
// answered 2xx, and a remote-write receiver answers 2xx once it has taken
// responsibility for the samples (Prometheus and Mimir after writing them
// to their write-ahead log, as their own remote-write clients assume).
// So everything acknowledged is already as durable as the receiver makes
// it, and the consumer may commit past it.
func (c *Client) Sync(context.Context) (int, error) { return 0, nil }

// Close releases the idle connections. In-flight requests are the
// server's to finish before it closes the backend.
func (c *Client) Close() error {
	c.http.CloseIdleConnections()
	return nil
}

// version is Ferry's module version for the User-Agent, "dev" for a build
// outside a released module (go run, go test, a source checkout).
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok || info.Main.Version == "" || info.Main.Version == "(devel)" {
		return "dev"
	}
	return info.Main.Version
}
