package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// nativeHistogram is a Prometheus native histogram: exponential buckets
// whose upper bounds are base^i, base = 2^(2^-schema), kept by index, and a
// zero bucket for what lies at or below the zero threshold. Two scrapes of
// one histogram may differ in which buckets they expose (only populated
// ones are) and in schema (the client halves the resolution when there are
// too many), so they are added and subtracted by index, at the coarser
// schema.
type nativeHistogram struct {
	schema    int32
	zeroBound float64
	zeroCount float64
	buckets   map[int]float64
	sum       float64
	count     float64
}

// protoAccept asks for the delimited protobuf exposition format, the only
// one that carries native buckets.
const protoAccept = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"

// scrapeNative fetches http://addr/metrics as protobuf and returns the
// native histogram called name, summed over its series; ok is false when
// it has no native buckets.
func scrapeNative(ctx context.Context, addr, name string) (h nativeHistogram, ok bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return h, false, err
	}
	req.Header.Set("Accept", protoAccept)
	resp, err := httpClient.Do(req)
	if err != nil {
		return h, false, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return h, false, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	dec := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			if errors.Is(err, io.EOF) {
				return h, ok, nil
			}
			return h, false, fmt.Errorf("decode %s/metrics: %w", addr, err)
		}
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if n, isNative := nativeOf(m.GetHistogram()); isNative {
				h, ok = h.add(n), true
			}
		}
	}
}

// nativeOf reads the native buckets of a histogram. Negative buckets (a
// latency below zero: clocks apart) count as the zero bucket.
func nativeOf(p *dto.Histogram) (nativeHistogram, bool) {
	if p == nil || p.Schema == nil {
		return nativeHistogram{}, false
	}
	h := nativeHistogram{
		schema: p.GetSchema(), zeroBound: p.GetZeroThreshold(), buckets: map[int]float64{},
		sum: p.GetSampleSum(), count: float64(p.GetSampleCount()),
	}
	if p.GetSampleCountFloat() > 0 {
		h.count = p.GetSampleCountFloat()
	}
	h.zeroCount = float64(p.GetZeroCount()) + p.GetZeroCountFloat()
	each := func(spans []*dto.BucketSpan, deltas []int64, counts []float64, f func(int, float64)) {
		idx, k := 0, 0
		var run int64
		for si, s := range spans {
			if si == 0 {
				idx = int(s.GetOffset())
			} else {
				idx += int(s.GetOffset())
			}
			for range s.GetLength() {
				var c float64
				switch {
				case k < len(deltas):
					run += deltas[k]
					c = float64(run)
				case k < len(counts):
					c = counts[k]
				}
				f(idx, c)
				idx++
				k++
			}
		}
	}
	each(p.GetPositiveSpan(), p.GetPositiveDelta(), p.GetPositiveCount(), func(i int, c float64) { h.buckets[i] += c })
	each(p.GetNegativeSpan(), p.GetNegativeDelta(), p.GetNegativeCount(), func(_ int, c float64) { h.zeroCount += c })
	return h, true
}

// at returns h's buckets at schema s, no finer than h's own.
func (h nativeHistogram) at(s int32) map[int]float64 {
	if s >= h.schema {
		return h.buckets
	}
	d := uint(h.schema - s) //nolint:gosec // positive: s < h.schema
	out := make(map[int]float64, len(h.buckets))
	for i, c := range h.buckets {
		// Bucket i of the finer schema lies inside bucket ceil(i / 2^d).
		out[(i+(1<<d)-1)>>d] += c
	}
	return out
}

// combine returns h + sign·o at the coarser of their schemas.
func (h nativeHistogram) combine(o nativeHistogram, sign float64) nativeHistogram {
	if h.buckets == nil {
		h = nativeHistogram{schema: o.schema, zeroBound: o.zeroBound, buckets: map[int]float64{}}
	}
	s := min(h.schema, o.schema)
	out := nativeHistogram{
		schema: s, zeroBound: max(h.zeroBound, o.zeroBound), buckets: map[int]float64{},
		zeroCount: h.zeroCount + sign*o.zeroCount, sum: h.sum + sign*o.sum, count: h.count + sign*o.count,
	}
	for i, c := range h.at(s) {
		out.buckets[i] += c
	}
	for i, c := range o.at(s) {
		out.buckets[i] += sign * c
	}
	return out
}

func (h nativeHistogram) add(o nativeHistogram) nativeHistogram   { return h.combine(o, 1) }
func (h nativeHistogram) minus(o nativeHistogram) nativeHistogram { return h.combine(o, -1) }

// histogram lays h out as cumulative buckets, every bucket from the lowest
// populated one to the highest (empty ones too, so that each bucket's lower
// bound is the bound before it), for histogram.quantile.
func (h nativeHistogram) histogram() histogram {
	out := histogram{sum: h.sum, count: h.count}
	idx := make([]int, 0, len(h.buckets))
	for i, c := range h.buckets {
		if c != 0 {
			idx = append(idx, i)
		}
	}
	cum := h.zeroCount
	if len(idx) > 0 {
		slices.Sort(idx)
		base := math.Pow(2, math.Pow(2, -float64(h.schema)))
		out.bounds = append(out.bounds, math.Pow(base, float64(idx[0]-1)))
		out.counts = append(out.counts, cum)
		for i := idx[0]; i <= idx[len(idx)-1]; i++ {
			cum += h.buckets[i]
			out.bounds = append(out.bounds, math.Pow(base, float64(i)))
			out.counts = append(out.counts, cum)
		}
	}
	out.bounds = append(out.bounds, math.Inf(1))
	out.counts = append(out.counts, cum)
	return out
}
