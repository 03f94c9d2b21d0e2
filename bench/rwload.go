package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/snappy"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// rwShape describes realistic remote-write 1.0 requests, as a Prometheus
// sends them: each tenant has SeriesPerTenant series, sent in requests of
// SamplesPerRequest series with one float sample each (Prometheus's
// default max_samples_per_send is 2,000); step k of a series is at
// StartMs + k*StepMs (one scrape interval apart).
type rwShape struct {
	Tenants           int
	SeriesPerTenant   int
	SamplesPerRequest int
	StartMs, StepMs   int64
}

// blocks is the number of requests that carry one step of a tenant.
func (s rwShape) blocks() int {
	return (s.SeriesPerTenant + s.SamplesPerRequest - 1) / s.SamplesPerRequest
}

// rwFamilies are metric names of the kind a Kubernetes Prometheus sends;
// the *_bucket ones get an le label, as histogram buckets do.
var rwFamilies = []string{
	"container_cpu_usage_seconds_total", "container_memory_working_set_bytes",
	"container_network_receive_bytes_total", "container_network_transmit_bytes_total",
	"http_requests_total", "http_request_duration_seconds_bucket",
	"grpc_server_handled_total", "grpc_server_handling_seconds_bucket",
	"process_cpu_seconds_total", "process_resident_memory_bytes",
	"go_goroutines", "go_memstats_heap_inuse_bytes",
	"kube_pod_container_status_restarts_total", "node_filesystem_avail_bytes",
	"up", "scrape_duration_seconds",
}

var rwBuckets = []string{"0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "+Inf"}

// rwSeriesPerPod is how many series one scraped target (a pod) exposes in
// this model: the series of a target share its instance, pod and job.
const rwSeriesPerPod = 40

// seriesLabels returns the labels of series i of tenant t, sorted by name:
// eight or nine labels of realistic lengths (about 150 bytes per series
// encoded, against loadgen's 50).
func (s rwShape) seriesLabels(t, i int) []prompb.Label {
	fam := rwFamilies[i%len(rwFamilies)]
	pod := i / rwSeriesPerPod
	ls := []prompb.Label{
		{Name: "__name__", Value: fam},
		{Name: "cluster", Value: "bench-" + strconv.Itoa(t)},
		{Name: "container", Value: "app"},
		{Name: "instance", Value: fmt.Sprintf("10.%d.%d.%d:8080", t%256, (pod/256)%256, pod%256)},
		{Name: "job", Value: "kubernetes-pods/app-" + strconv.Itoa(pod%10)},
		{Name: "namespace", Value: "team-" + strconv.Itoa(pod%20)},
		{Name: "pod", Value: fmt.Sprintf("app-%d-7c9f8b6d4-%05x", pod%10, pod)},
		// A distinguishing label: the series of one family on one pod.
		{Name: "series", Value: strconv.Itoa(i / len(rwFamilies))},
	}
	if len(fam) > 7 && fam[len(fam)-7:] == "_bucket" {
		ls = append(ls, prompb.Label{Name: "le", Value: rwBuckets[(i/len(rwFamilies))%len(rwBuckets)]})
	}
	sort.Slice(ls, func(a, b int) bool { return ls[a].Name < ls[b].Name })
	return ls
}

// request is tenant t's request carrying block b of its series at step k.
func (s rwShape) request(t, b, k int) *prompb.WriteRequest {
	first := b * s.SamplesPerRequest
	last := min(first+s.SamplesPerRequest, s.SeriesPerTenant)
	ts := s.StartMs + int64(k)*s.StepMs
	req := &prompb.WriteRequest{Timeseries: make([]prompb.TimeSeries, 0, last-first)}
	for i := first; i < last; i++ {
		req.Timeseries = append(req.Timeseries, prompb.TimeSeries{
			Labels:  s.seriesLabels(t, i),
			Samples: []prompb.Sample{{Value: float64(i%97) + float64(k)*1.5, Timestamp: ts}},
		})
	}
	return req
}

// rwBody is one remote-write request ready to send: the record value
// (uncompressed protobuf) and the HTTP body (snappy block format).
type rwBody struct {
	Tenant     string
	Raw        []byte
	Compressed []byte
	Samples    int
	// OTLP marks an OTLP/HTTP request (protobuf, gzip) instead of remote
	// write 1.0 (snappy).
	OTLP bool
}

func (s rwShape) body(t, b, k int) (rwBody, error) {
	req := s.request(t, b, k)
	raw, err := req.Marshal()
	if err != nil {
		return rwBody{}, fmt.Errorf("marshal request: %w", err)
	}
	return rwBody{Tenant: rwTenant(t), Raw: raw, Compressed: snappy.Encode(nil, raw), Samples: len(req.Timeseries)}, nil
}

// tenantBodies returns tenant t's requests of steps [0, steps) in the order
// a remote-write client must send them (every block of step k before step
// k+1), so that no series goes back in time.
func (s rwShape) tenantBodies(t, steps int) ([]rwBody, error) {
	out := make([]rwBody, 0, steps*s.blocks())
	for k := range steps {
		for b := range s.blocks() {
			body, err := s.body(t, b, k)
			if err != nil {
				return nil, err
			}
			out = append(out, body)
		}
	}
	return out, nil
}

// rwTenant names tenant t of the remote-write stages.
func rwTenant(t int) string { return "rw-tenant-" + strconv.Itoa(t) }

// newRWClient is an HTTP/1.1 client keeping one idle connection per
// concurrent sender, as Prometheus's remote-write queue does per shard.
func newRWClient(conns int) *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        conns,
			MaxIdleConnsPerHost: conns,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
	}
}

// postRW sends one remote-write 1.0 request and returns the status code;
// the answer's body is read and dropped so the connection is reused.
func postRW(ctx context.Context, cl *http.Client, url string, b rwBody) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b.Compressed))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if b.OTLP {
		req.Header.Set("Content-Encoding", "gzip")
	} else {
		req.Header.Set("Content-Encoding", "snappy")
		req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	}
	req.Header.Set("User-Agent", "ferry-bench")
	req.Header.Set("X-Scope-OrgID", b.Tenant)
	resp, err := cl.Do(req)
	if err != nil {
		return 0, err
	}
	if !b.OTLP {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	if resp.StatusCode != http.StatusOK {
		// The OTLP answer's google.rpc.Status says why: the report's first
		// error names the gateway's reason, not only the status.
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		_ = resp.Body.Close()
		return resp.StatusCode, otlpStatusError(resp.StatusCode, body)
	}
	// An OTLP 200 may still reject points (partial_success): count it
	// failed, as a sample counts only when it was accepted.
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	if err != nil {
		return resp.StatusCode, err
	}
	rejected, msg, err := otlpRejected(body)
	if err == nil && rejected > 0 {
		err = fmt.Errorf("OTLP partial success: %d points rejected: %s", rejected, msg)
	}
	return resp.StatusCode, err
}

// sendCounts counts what a load generator's requests did.
type sendCounts struct {
	ok, okSamples, failed atomic.Int64
	firstErr              atomic.Pointer[string]
}

func (c *sendCounts) record(b rwBody, status int, err error) {
	if err == nil && status/100 == 2 {
		c.ok.Add(1)
		c.okSamples.Add(int64(b.Samples))
		return
	}
	if errors.Is(err, context.Canceled) {
		return // the run ended while the request was in flight
	}
	c.failed.Add(1)
	msg := fmt.Sprintf("HTTP %d", status)
	if err != nil {
		msg = err.Error()
	}
	c.firstErr.CompareAndSwap(nil, &msg)
}

// snapshot is the counts at one moment.
type snapshot struct{ ok, okSamples, failed int64 }

func (c *sendCounts) snapshot() snapshot {
	return snapshot{ok: c.ok.Load(), okSamples: c.okSamples.Load(), failed: c.failed.Load()}
}

func (c *sendCounts) errString() string {
	if p := c.firstErr.Load(); p != nil {
		return *p
	}
	return ""
}

// closedLoop runs clients senders until ctx ends, each sending its next
// request as soon as the previous one was answered: the most load the
// clients can offer. next returns client c's n-th request.
func closedLoop(ctx context.Context, cl *http.Client, url string, clients int, next func(c, n int) rwBody, counts *sendCounts) {
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				b := next(c, n)
				status, err := postRW(ctx, cl, url, b)
				if ctx.Err() != nil {
					return
				}
				counts.record(b, status, err)
			}
		})
	}
	wg.Wait()
}

// openLoop sends requests at rate per second, paced from the start, on up
// to maxInflight concurrent senders, until ctx ends; then it waits for the
// requests already due to be answered (each within the client's timeout)
// before it returns, so a slow answer is timed rather than dropped. A
// request's latency is measured from when it was due, not from when a
// sender took it, so a backlog of late requests counts against the latency
// (no coordinated omission). Latencies of requests due in [from, to) go to
// lat.
func openLoop(ctx context.Context, cl *http.Client, url string, rate float64, maxInflight int, next func(n int) rwBody,
	counts *sendCounts, from, to time.Time, lat *durations,
) {
	type job struct {
		due time.Time
		b   rwBody
	}
	jobs := make(chan job, 4*maxInflight)
	reqCtx := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for range maxInflight {
		wg.Go(func() {
			for j := range jobs {
				status, err := postRW(reqCtx, cl, url, j.b)
				counts.record(j.b, status, err)
				if err == nil && status/100 == 2 && !j.due.Before(from) && j.due.Before(to) {
					lat.add(time.Since(j.due))
				}
			}
		})
	}
	defer func() { close(jobs); wg.Wait() }()
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	for n := 0; ; n++ {
		due := start.Add(time.Duration(n) * interval)
		if d := time.Until(due); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		select {
		case <-ctx.Done():
			return
		case jobs <- job{due: due, b: next(n)}:
		}
	}
}
