package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/ferrylabs/ferry/internal/tenant"
	"github.com/ferrylabs/ferry/limits"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/proto/wire"
)

// The response headers of remote write 2.0: what the receiver wrote.
const (
	headerSamplesWritten    = "X-Prometheus-Remote-Write-Samples-Written"
	headerHistogramsWritten = "X-Prometheus-Remote-Write-Histograms-Written"
	headerExemplarsWritten  = "X-Prometheus-Remote-Write-Exemplars-Written"
)

// counts are the data points of a request, by kind.
type counts struct{ series, samples, histograms, exemplars int }

func countOf(req *prompb.WriteRequest) counts {
	c := counts{series: len(req.Timeseries)}
	for i := range req.Timeseries {
		c.samples += len(req.Timeseries[i].Samples)
		c.histograms += len(req.Timeseries[i].Histograms)
		c.exemplars += len(req.Timeseries[i].Exemplars)
	}
	return c
}

func (c counts) total() int { return c.samples + c.histograms + c.exemplars }

// ServeHTTP answers one remote-write request: 204 once Kafka acknowledged
// every record of it, or the error status Prometheus acts on (it retries
// 5xx and 429 and drops other 4xx).
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	tenant, class, rej := g.tenantOf(r.Header)
	var written *counts
	var v Version
	if rej == nil {
		v, written, rej = g.push(w, r, tenant, start)
	}
	status := http.StatusNoContent
	if rej != nil {
		status = rej.status
	}
	if v == V2 && written != nil {
		w.Header().Set(headerSamplesWritten, strconv.Itoa(written.samples))
		w.Header().Set(headerHistogramsWritten, strconv.Itoa(written.histograms))
		exemplars := 0
		if g.cfg.ExemplarsStored {
			exemplars = written.exemplars
		}
		w.Header().Set(headerExemplarsWritten, strconv.Itoa(exemplars))
	}
	g.metrics.requests.WithLabelValues(strconv.Itoa(status), class).Inc()
	if rej == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	g.refused(w, r, "request rejected", tenant, rej)
	http.Error(w, rej.msg, status)
}

// refused counts and logs a refused request (a server-side refusal at
// warn, the client's own mistakes at debug) and sets the Retry-After the
// refusal asks for; the caller writes the body its protocol wants.
func (g *Gateway) refused(w http.ResponseWriter, r *http.Request, msg, tenant string, rej *reject) {
	g.metrics.rejected.WithLabelValues(rej.reason).Inc()
	level := slog.LevelDebug
	if rej.status >= 500 {
		level = slog.LevelWarn
	}
	g.logger.Log(r.Context(), level, msg, "tenant", tenant, "status", rej.status, "reason", rej.reason, "err", rej.msg)
	if rej.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(rej.retryAfter))
	}
}

// tenantOf names the request's tenant and how it was named.
func (g *Gateway) tenantOf(h http.Header) (string, string, *reject) {
	vals := h.Values(g.cfg.TenantHeader)
	switch {
	case len(vals) > 1:
		return "", classHeader, badRequest(reasonBadTenant, "%d %s headers: send one", len(vals), g.cfg.TenantHeader)
	case len(vals) == 1:
		if err := tenant.Validate(vals[0]); err != nil {
			return "", classHeader, badRequest(reasonBadTenant, "%s: %v", g.cfg.TenantHeader, err)
		}
		return vals[0], classHeader, nil
	case g.cfg.DefaultTenant != "":
		return g.cfg.DefaultTenant, classDefault, nil
	}
	return "", classNone, rejectf(http.StatusUnauthorized, reasonNoTenant, "no tenant: send the %s header", g.cfg.TenantHeader)
}

// push reads, checks and produces one request. written is what Kafka
// acknowledged, nil when nothing was produced.
func (g *Gateway) push(w http.ResponseWriter, r *http.Request, tenant string, start time.Time) (Version, *counts, *reject) {
	s := getScratch()
	reuse := true
	defer func() {
		if reuse {
			s.put()
		}
	}()
	v, held, rej := g.readRequest(w, r, s, start)
	defer func() { g.inflight.release(held) }() // held grows below
	if rej != nil {
		return v, nil, rej
	}
	raw := s.raw
	width, rej := g.shardWidth(r.Context(), tenant)
	if rej != nil {
		return v, nil, rej
	}
	var c counts
	ok := false
	if width == 1 {
		// A sharded tenant's series go to several records: decode them.
		c, ok = g.scan(&s.dec, raw, v, start)
	}
	if ok {
		// What the path below would do with this request, but for
		// decoding it and checking what it decoded: raw is the record.
		g.count(c)
		if rej := g.admit(tenant, c.total(), start); rej != nil {
			return v, nil, rej
		}
		if c.series > 0 {
			s.values = append(s.values[:0], raw)
			if rej := g.produce(r.Context(), tenant, s.values, nil); rej != nil {
				reuse = false // raw may still be in flight
				return v, nil, rej
			}
		}
		return v, &c, nil
	}
	req, checked, extra, rej := g.decode(raw, v, s)
	held += extra
	if rej != nil {
		return v, nil, rej
	}
	c = countOf(req)
	g.count(c)
	if rej := g.admit(tenant, c.total(), start); rej != nil {
		return v, nil, rej
	}
	dropped, filterErr := filterSeries(g.cfg.Limits, req, start)
	// A bad series without samples drops none, but the record must still
	// leave it out: forward the client's bytes only when nothing was wrong.
	asIs := v == V1 && filterErr == nil
	values, slots, rej := g.records(s, req, raw, asIs, asIs && checked, width)
	if rej != nil {
		return v, nil, rej
	}
	if len(values) > 0 {
		if rej := g.produce(r.Context(), tenant, values, slots); rej != nil {
			// Records may still be in flight, and one may be raw.
			reuse = false
			return v, nil, rej
		}
	}
	written := c
	if dropped > 0 || filterErr != nil {
		// Series left out count for nothing, and their samples neither.
		written = countOf(req)
	}
	if filterErr != nil {
		return v, &written, badRequest(reasonBadData, "%v", filterErr)
	}
	return v, &written, nil
}

// filterSeries applies the pusher's storage-free checks (label names and
// values, samples too far in the future or before 1970) to req in place,
// removing what the pusher would refuse. It returns the number of samples
// removed and the first problem, worded as the pusher words it.
func filterSeries(l limits.Limits, req *prompb.WriteRequest, now time.Time) (int64, error) {
	n, first := l.Filter(req, now)
	if first != nil {
		return n, fmt.Errorf("%d samples rejected: %w", n, first)
	}
	return n, nil
}

// scan returns the counts of raw when wire.Decoder.Scan vouches for it: a
// 1.0 request that d decodes, whose every series passes the pusher's
// checks at now, and that fits one record. Such a request, nearly every
// one Prometheus sends, is then produced as it is, read once: decoding it
// and checking what was decoded read its labels twice, the second time
// from far caches, and were more than half of the gateway's CPU time
// (issue 13). For any other request ok is false, and push decodes it.
func (g *Gateway) scan(d *wire.Decoder, raw []byte, v Version, now time.Time) (c counts, ok bool) {
	if v != V1 || len(raw) > g.cfg.MaxRecordBytes || g.noScan {
		return counts{}, false
	}
	sum, ok := d.Scan(raw, g.cfg.Limits.LabelRules())
	if !ok {
		return counts{}, false
	}
	if minTs, maxTs := g.cfg.Limits.TimeBounds(now); sum.Samples > 0 && (sum.MinTime < minTs || sum.MaxTime > maxTs) {
		return counts{}, false
	}
	return counts{series: sum.Series, samples: sum.Samples}, true
}

// count adds a request's data points to the metrics.
func (g *Gateway) count(c counts) {
	g.metrics.series.Add(float64(c.series))
	g.metrics.samples.Add(float64(c.samples))
	g.metrics.histograms.Add(float64(c.histograms))
	g.metrics.exemplars.Add(float64(c.exemplars))
}

// admit applies the tenant's ingestion rate limit.
func (g *Gateway) admit(tenant string, n int, now time.Time) *reject {
	wait, tooMany := g.limiter.admit(tenant, n, now)
	switch {
	case tooMany:
		return rejectf(http.StatusRequestEntityTooLarge, reasonRateLimited, "request of %d samples is over the tenant burst of %d (-gateway.tenant-burst)", n, g.cfg.TenantBurst)
	case wait > 0:
		rej := rejectf(http.StatusTooManyRequests, reasonRateLimited, "tenant %q is over its ingestion rate limit of %g samples/s (-gateway.tenant-rate-limit)", tenant, g.cfg.TenantRateLimit)
		rej.retryAfter = retryAfterSeconds(wait)
		return rej
	}
	return nil
}

// records turns req into record values the consumer will accept. When
// asIs, raw (the client's own 1.0 bytes) is the value if it fits one
// record: no re-encoding, and nothing the client sent is lost. rawChecked
// says that wire.Decoder accepted raw, which then needs no second check:
// the Decoder refuses all that the consumer's check of a record
// (wire.ValidateWriteRequest) refuses, and FuzzDecode holds it to that.
// For a tenant whose shard is width > 1 partitions wide, the series are
// split by slot too, and slots[k] is the slot of values[k]; otherwise
// slots is nil.
func (g *Gateway) records(s *scratch, req *prompb.WriteRequest, raw []byte, asIs, rawChecked bool, width int) (values [][]byte, slots []int, _ *reject) {
	if len(req.Timeseries) == 0 && len(req.Metadata) == 0 {
		return nil, nil, nil
	}
	if width > 1 {
		var err error
		if values, slots, err = s.splitShards(req, g.cfg.MaxRecordBytes, width); err != nil {
			return nil, nil, rejectf(http.StatusRequestEntityTooLarge, reasonRecordTooBig, "%v (-gateway.max-record-bytes)", err)
		}
	} else if asIs && len(raw) <= g.cfg.MaxRecordBytes {
		values = append(s.values[:0], raw)
		s.values = values
		if rawChecked {
			return values, nil, nil
		}
	} else {
		var err error
		if values, err = s.split(req, g.cfg.MaxRecordBytes); err != nil {
			return nil, nil, rejectf(http.StatusRequestEntityTooLarge, reasonRecordTooBig, "%v (-gateway.max-record-bytes)", err)
		}
	}
	if len(values) > 1 {
		g.metrics.splitRequests.Inc()
	}
	for i, b := range values {
		if err := wire.ValidateWriteRequest(b); err != nil {
			return nil, nil, badRequest(reasonBadData, "record %d of the request would be skipped by the consumer: %v", i, err)
		}
	}
	return values, slots, nil
}

// produce puts the values on Kafka within -gateway.produce-timeout, each
// on its slot of the tenant's shard when slots is not nil.
func (g *Gateway) produce(ctx context.Context, tenant string, values [][]byte, slots []int) *reject {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.ProduceTimeout)
	defer cancel()
	start := time.Now()
	var err error
	if slots != nil {
		err = g.shards.produceSlots(ctx, tenant, values, slots)
	} else {
		err = g.producer.produce(ctx, tenant, values)
	}
	g.metrics.produceDuration.Observe(time.Since(start).Seconds())
	switch {
	case err == nil:
		g.metrics.records.Add(float64(len(values)))
		return nil
	case recordTooLarge(err):
		return rejectf(http.StatusRequestEntityTooLarge, reasonTooLarge, "Kafka refused a record as too large: %v (lower -gateway.max-record-bytes)", err)
	}
	rej := rejectf(http.StatusServiceUnavailable, reasonKafka, "Kafka did not acknowledge the records within %s: %v", g.cfg.ProduceTimeout, err)
	rej.retryAfter = 1
	return rej
}

// shardWidth is how many partitions tenant's series spread over: its
// shard size, at most the topic's partition count. A tenant of shard size
// 1 needs no partition count, and asks Kafka nothing.
func (g *Gateway) shardWidth(ctx context.Context, tenant string) (int, *reject) {
	size := g.cfg.shardSize(tenant)
	if size == 1 || g.shards == nil {
		return 1, nil
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.ProduceTimeout)
	defer cancel()
	n, err := g.shards.partitions(ctx)
	if err != nil {
		rej := rejectf(http.StatusServiceUnavailable, reasonKafka, "the topic's partition count is unknown: %v", err)
		rej.retryAfter = 1
		return 0, rej
	}
	return min(size, n), nil
}
