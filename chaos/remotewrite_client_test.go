package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/golang/snappy"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// This file holds the remote-write clients of the cluster tests and what
// they remember: which requests the gateway answered, when, and how.

// rwMetric is the metric the remote-write clients send.
const rwMetric = "chaos_cluster_value"

// answer is one HTTP answer of the gateway (status 0: no answer, such as a
// refused connection or a client timeout).
type answer struct {
	client int
	seq    int
	status int
	at     time.Time
}

// rwLoad is several remote-write clients, each its own tenant, each sending
// one request at a time: request seq carries one sample per series, value
// seq at baseMs+seq. A client retries a request until it is answered 2xx,
// as Prometheus does after a 5xx, and only then sends the next one; so its
// acknowledged requests are exactly seq 0 to acked-1, and the TSDB must
// hold exactly that many samples of each of its series.
type rwLoad struct {
	gatewayAddr string
	tenants     []string
	series      int
	baseMs      int64
	interval    time.Duration // pause after an acknowledged request

	http *http.Client

	mu      sync.Mutex
	acked   []int // per client
	answers []answer
}

func newRWLoad(gatewayAddr string, tenants []string, series int, baseMs int64) *rwLoad {
	return &rwLoad{
		gatewayAddr: gatewayAddr, tenants: tenants, series: series, baseMs: baseMs,
		interval: 50 * time.Millisecond,
		// Beyond the gateway's produce timeout (10 s): the gateway, not the
		// client, decides that Kafka took too long.
		http:  &http.Client{Timeout: 30 * time.Second},
		acked: make([]int, len(tenants)),
	}
}

// body returns the snappy-compressed request seq of client c.
func (l *rwLoad) body(c, seq int) []byte {
	req := &prompb.WriteRequest{Timeseries: make([]prompb.TimeSeries, l.series)}
	for s := range l.series {
		req.Timeseries[s] = prompb.TimeSeries{
			Labels: []prompb.Label{
				{Name: "__name__", Value: rwMetric},
				{Name: "client", Value: strconv.Itoa(c)},
				{Name: "series", Value: strconv.Itoa(s)},
			},
			Samples: []prompb.Sample{{Value: float64(seq), Timestamp: l.baseMs + int64(seq)}},
		}
	}
	raw, err := req.Marshal()
	if err != nil {
		panic(fmt.Sprintf("marshal: %v", err)) // an in-memory message cannot fail
	}
	return snappy.Encode(nil, raw)
}

// run sends client c's requests until ctx is done and its last request is
// acknowledged, or until giveUp passes (then it returns an error).
func (l *rwLoad) run(ctx context.Context, c int, giveUp time.Time) error {
	for seq := 0; ; seq++ {
		if ctx.Err() != nil {
			return nil
		}
		body := l.body(c, seq)
		for try := 0; ; try++ {
			status := l.post(c, body)
			l.mu.Lock()
			l.answers = append(l.answers, answer{client: c, seq: seq, status: status, at: time.Now()})
			if status/100 == 2 {
				l.acked[c] = seq + 1
			}
			l.mu.Unlock()
			if status/100 == 2 {
				break
			}
			if status/100 == 4 {
				return fmt.Errorf("client %d: request %d answered %d: a valid request must never be refused", c, seq, status)
			}
			if time.Now().After(giveUp) {
				return fmt.Errorf("client %d: request %d still not acknowledged after %d tries (last status %d)", c, seq, try+1, status)
			}
			time.Sleep(min(time.Duration(try+1)*250*time.Millisecond, 2*time.Second))
		}
		time.Sleep(l.interval)
	}
}

// post sends one request and returns the status (0: no answer).
func (l *rwLoad) post(c int, body []byte) int {
	req, err := http.NewRequest(http.MethodPost, "http://"+l.gatewayAddr+"/api/v1/push", bytes.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	req.Header.Set("X-Scope-OrgID", l.tenants[c])
	resp, err := l.http.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// statusCounts counts the answers by class: "2xx", "5xx", "4xx" and
// "none" (no answer).
func (l *rwLoad) statusCounts() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int64{}
	for _, a := range l.answers {
		if a.status == 0 {
			out["none"]++
			continue
		}
		out[strconv.Itoa(a.status/100)+"xx"]++
	}
	return out
}

// answeredOK returns the 2xx answers given in [from, to).
func (l *rwLoad) answeredOK(from, to time.Time) []answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []answer
	for _, a := range l.answers {
		if a.status/100 == 2 && !a.at.Before(from) && a.at.Before(to) {
			out = append(out, a)
		}
	}
	return out
}

func (l *rwLoad) ackedCounts() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.acked...)
}

// kafkaSamples reads the whole topic and counts, for every client, series
// and seq, how many times the sample is in Kafka.
func kafkaSamples(ctx context.Context, cl *kgo.Client, topic string, ends map[int32]int64, clients, series int) ([][]map[int]int, error) {
	out := make([][]map[int]int, clients)
	for c := range out {
		out[c] = make([]map[int]int, series)
		for s := range out[c] {
			out[c][s] = map[int]int{}
		}
	}
	left := int64(0)
	for _, e := range ends {
		left += e
	}
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading the topic back, %d records still unread: %w", left, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, ferr
		}
		var derr error
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= ends[r.Partition] {
				return
			}
			left--
			var req prompb.WriteRequest
			if err := req.Unmarshal(r.Value); err != nil {
				derr = fmt.Errorf("partition %d offset %d: %w", r.Partition, r.Offset, err)
				return
			}
			for _, ts := range req.Timeseries {
				c, s := -1, -1
				for _, lb := range ts.Labels {
					switch lb.Name {
					case "client":
						c, _ = strconv.Atoi(lb.Value)
					case "series":
						s, _ = strconv.Atoi(lb.Value)
					}
				}
				if c < 0 || c >= clients || s < 0 || s >= series {
					derr = fmt.Errorf("partition %d offset %d: unexpected series %v", r.Partition, r.Offset, ts.Labels)
					return
				}
				for _, smp := range ts.Samples {
					out[c][s][int(smp.Value)]++
				}
			}
		})
		if derr != nil {
			return nil, derr
		}
	}
	return out, nil
}

// queryVector runs an instant query for a tenant and returns its results
// by the value of label.
func queryVector(addr, tenant, query, label string, at time.Time) (map[string]float64, error) {
	q := url.Values{}
	q.Set("query", query)
	q.Set("time", strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64))
	code, body, err := httpGet(addr, "/api/v1/query?"+q.Encode(), http.Header{"X-Scope-Orgid": {tenant}})
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("query %q for %s: HTTP %d: %s", query, tenant, code, body)
	}
	var r struct {
		Status string `json:"status"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return nil, fmt.Errorf("query %q: decoding %s: %w", query, body, err)
	}
	if r.Status != "success" || r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %q: unexpected answer %s", query, body)
	}
	out := map[string]float64{}
	for _, res := range r.Data.Result {
		s, _ := res.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("query %q: value %q: %w", query, s, err)
		}
		out[res.Metric[label]] = v
	}
	return out, nil
}
