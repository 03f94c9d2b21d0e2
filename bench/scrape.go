package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// metrics is a scrape: every sample of a /metrics page.
type metrics []sample

// httpClient bounds a scrape; a pusher with a thousand open TSDBs on a
// loaded 2-core machine took over 5 s to answer /metrics.
var httpClient = &http.Client{Timeout: 20 * time.Second}

// scrape fetches and parses http://addr/metrics.
func scrape(ctx context.Context, addr string) (metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	// Uncompressed: the consumers are scraped every pollEvery while they
	// are measured, and gzip was half of what that cost them (a Go
	// profile put the scrapes at 8-10% of their CPU at (4,1000,10)). On
	// loopback the bytes cost nothing.
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics reads the Prometheus text exposition format (the subset
// client_golang writes: no timestamps, escaped label values).
func parseMetrics(r io.Reader) (metrics, error) {
	var out metrics
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s := sample{labels: map[string]string{}}
		i := strings.IndexAny(line, "{ ")
		if i < 0 {
			return nil, fmt.Errorf("metrics line %q: no value", line)
		}
		var rest string
		s.name, rest = line[:i], line[i:]
		if strings.HasPrefix(rest, "{") {
			var err error
			rest, err = parseLabels(rest[1:], s.labels)
			if err != nil {
				return nil, fmt.Errorf("metrics line %q: %w", line, err)
			}
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("metrics line %q: no value", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		s.value = v
		out = append(out, s)
	}
	return out, sc.Err()
}

// parseLabels reads `a="x",b="y"}` into m and returns what follows the '}'.
func parseLabels(s string, m map[string]string) (string, error) {
	for {
		s = strings.TrimLeft(s, " ,")
		if strings.HasPrefix(s, "}") {
			return s[1:], nil
		}
		eq := strings.IndexByte(s, '=')
		if eq < 0 || len(s) < eq+2 || s[eq+1] != '"' {
			return "", fmt.Errorf("bad labels at %q", s)
		}
		name := strings.TrimSpace(s[:eq])
		s = s[eq+2:]
		var val strings.Builder
		i := 0
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[i])
				}
				continue
			}
			val.WriteByte(s[i])
		}
		if i >= len(s) {
			return "", fmt.Errorf("unterminated label value at %q", s)
		}
		m[name] = val.String()
		s = s[i+1:]
	}
}

// sum adds the samples called name whose labels include match.
func (ms metrics) sum(name string, match map[string]string) float64 {
	var t float64
	for _, s := range ms {
		if s.name != name {
			continue
		}
		ok := true
		for k, v := range match {
			ok = ok && s.labels[k] == v
		}
		if ok {
			t += s.value
		}
	}
	return t
}

// histogram is a classic Prometheus histogram: cumulative counts by upper
// bound, +Inf last.
type histogram struct {
	bounds []float64
	counts []float64
	sum    float64
	count  float64
}

// histogram returns the histogram called name, summed over all its series.
func (ms metrics) histogram(name string) histogram {
	byBound := map[float64]float64{}
	var h histogram
	for _, s := range ms {
		switch s.name {
		case name + "_bucket":
			le, err := strconv.ParseFloat(s.labels["le"], 64)
			if err == nil {
				byBound[le] += s.value
			}
		case name + "_sum":
			h.sum += s.value
		case name + "_count":
			h.count += s.value
		}
	}
	for b := range byBound {
		h.bounds = append(h.bounds, b)
	}
	slices.Sort(h.bounds)
	for _, b := range h.bounds {
		h.counts = append(h.counts, byBound[b])
	}
	return h
}

// add returns h + o (same bucket layout; an empty side is the zero value).
func (h histogram) add(o histogram) histogram {
	if len(h.bounds) == 0 {
		return o
	}
	if len(o.bounds) == 0 {
		return h
	}
	out := histogram{bounds: h.bounds, counts: slices.Clone(h.counts), sum: h.sum + o.sum, count: h.count + o.count}
	for i := range out.counts {
		if i < len(o.counts) {
			out.counts[i] += o.counts[i]
		}
	}
	return out
}

// minus returns h - o: the observations made between two scrapes.
func (h histogram) minus(o histogram) histogram {
	out := histogram{bounds: h.bounds, counts: slices.Clone(h.counts), sum: h.sum - o.sum, count: h.count - o.count}
	for i := range out.counts {
		if i < len(o.counts) {
			out.counts[i] -= o.counts[i]
		}
	}
	return out
}

// quantile estimates the q-quantile like PromQL's histogram_quantile:
// linear interpolation inside the bucket that holds it. It also returns the
// bucket's bounds, the estimate's uncertainty. A quantile in the +Inf
// bucket returns the highest finite bound and above=true.
func (h histogram) quantile(q float64) (v, lo, hi float64, above bool) {
	n := len(h.counts)
	if n == 0 || h.counts[n-1] == 0 {
		return math.NaN(), 0, 0, false
	}
	rank := q * h.counts[n-1]
	i, _ := slices.BinarySearchFunc(h.counts, rank, func(c, r float64) int {
		switch {
		case c < r:
			return -1
		case c > r:
			return 1
		}
		return 0
	})
	if i >= n {
		i = n - 1
	}
	if math.IsInf(h.bounds[i], 1) {
		return h.bounds[n-2], h.bounds[n-2], math.Inf(1), true
	}
	lo, below := 0.0, 0.0
	if i > 0 {
		lo, below = h.bounds[i-1], h.counts[i-1]
	}
	hi = h.bounds[i]
	inBucket := h.counts[i] - below
	if inBucket <= 0 {
		return hi, lo, hi, false
	}
	return lo + (hi-lo)*(rank-below)/inBucket, lo, hi, false
}
