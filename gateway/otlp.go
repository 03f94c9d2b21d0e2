package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"

	"github.com/prometheus/prometheus/storage/remote/otlptranslator/prometheusremotewrite"
)

// otlpOutcome is what became of an OTLP request's data points.
type otlpOutcome struct {
	points   int    // OTLP data points received
	rejected int    // of them, or of the series they became, refused
	message  string // why, for partial_success
}

// ServeOTLP answers one OTLP/HTTP metrics export as the OTLP/HTTP
// specification says: 200 with an ExportMetricsServiceResponse in the
// request's encoding once Kafka acknowledged every record — its
// partial_success counting what was refused —, or an error status with a
// google.rpc.Status body: 400 for a bad body, 413 over the size limits,
// 415 for another encoding, 429 and 503 with Retry-After when a retry
// can succeed. The metrics are translated by Prometheus's own OTLP
// translator into a remote-write 1.0 request, which then takes remote
// write's path: the pusher's decoder and checks, split, produce.
func (g *Gateway) ServeOTLP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	enc, gzipped, rej := otlpEncodingOf(r.Header)
	tenant, class := "", classNone
	if rej == nil {
		tenant, class, rej = g.tenantOf(r.Header)
	}
	var out otlpOutcome
	if rej == nil {
		out, rej = g.pushOTLP(w, r, tenant, enc, gzipped, start)
	}
	g.otlp.points.Add(float64(out.points))
	status := http.StatusOK
	if rej != nil {
		status = rej.status
	}
	g.otlp.requests.WithLabelValues(strconv.Itoa(status), class).Inc()
	if rej == nil {
		writeOTLPResponse(w, enc, out)
		return
	}
	g.refused(w, r, "OTLP request rejected", tenant, rej)
	writeOTLPStatus(w, enc, status, rej.msg)
}

// pushOTLP reads, translates, checks and produces one OTLP request. Every
// buffer is held in the in-flight bytes before it is allocated: the body
// as it arrives, its inflated bytes as they are inflated, the decoding
// (otlpDecodeFactor per byte), the translation (otlpExpansion per byte),
// then the translated request's decoding as remote write's.
func (g *Gateway) pushOTLP(w http.ResponseWriter, r *http.Request, tenant, enc string, gzipped bool, start time.Time) (otlpOutcome, *reject) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(start.Add(g.cfg.ReadTimeout))
	_ = rc.SetWriteDeadline(start.Add(g.cfg.WriteTimeout))

	s := getScratch()
	scratches := []*scratch{s}
	reuse := true
	defer func() {
		if reuse {
			for _, s := range scratches {
				s.put()
			}
		}
	}()
	var out otlpOutcome
	body, held, rej := g.readBody(w, r, s.body)
	s.body = body
	defer func() { g.inflight.release(held) }() // held grows below
	if rej != nil {
		return out, rej
	}
	raw := body
	if gzipped {
		var extra int64
		raw, extra, rej = g.gunzip(s.raw, body)
		s.raw = raw
		held += extra
		if rej != nil {
			return out, rej
		}
	}
	req, extra, rej := g.unmarshalOTLP(raw, enc)
	held += extra
	if rej != nil {
		return out, rej
	}
	md := req.Metrics()
	out.points = md.DataPointCount()
	delta := deltaPoints(md)
	tr, extra, rej := g.translate(r.Context(), md, len(raw))
	held += extra
	if rej != nil {
		return out, rej
	}
	// The tenant's rate takes the whole request or none of it, before
	// any chunk is checked.
	if rej := g.admit(tenant, tr.total, start); rej != nil {
		return out, rej
	}
	msg := tr.msg
	if delta > 0 {
		g.otlp.rejected.WithLabelValues("delta_temporality").Add(float64(delta))
		msg = joinMessages(fmt.Sprintf("%d data points of delta temporality refused: Ferry stores cumulative sums and histograms, as Prometheus does by default (export cumulative temporality, or convert with the Collector's deltatocumulative processor)", delta), msg)
	}
	out.rejected, out.message = delta, msg

	width, rej := g.shardWidth(r.Context(), tenant)
	if rej != nil {
		return out, rej
	}
	var values [][]byte
	var slots []int
	for _, chunk := range tr.chunks {
		cs := getScratch()
		scratches = append(scratches, cs)
		v, sl, dropped, extra, rej, filterErr := g.checkOTLPChunk(cs, chunk, start, width)
		held += extra
		if rej != nil {
			return out, rej
		}
		if filterErr != nil {
			g.otlp.rejected.WithLabelValues("invalid_series").Add(float64(dropped))
			out.rejected += int(dropped)
			out.message = joinMessages(out.message, filterErr.Error())
		}
		values = append(values, v...)
		slots = append(slots, sl...)
	}
	if len(values) == 0 {
		if out.rejected > 0 || out.message != "" {
			return out, badRequest(reasonBadData, "nothing of the request can be stored: %s", out.message)
		}
		return out, nil
	}
	if rej := g.produce(r.Context(), tenant, values, slots); rej != nil {
		reuse = false // records may still be in flight
		return out, rej
	}
	return out, nil
}

// checkOTLPChunk takes one chunk of a translated request through remote
// write 1.0's path, in its own scratch s: the pusher's decoder, the
// pusher's checks (what they refuse is dropped and said in filterErr),
// and the split into record values (by slot of the tenant's shard when
// width > 1, slots[k] being values[k]'s).
func (g *Gateway) checkOTLPChunk(s *scratch, chunk []byte, now time.Time, width int) (values [][]byte, slots []int, dropped, held int64, rej *reject, filterErr error) {
	req, checked, held, rej := g.decode(chunk, V1, s)
	if rej != nil {
		rej.msg = "translated request: " + rej.msg
		return nil, nil, 0, held, rej, nil
	}
	g.count(countOf(req))
	dropped, filterErr = filterSeries(g.cfg.Limits, req, now)
	asIs := filterErr == nil
	values, slots, rej = g.records(s, req, chunk, asIs, asIs && checked, width)
	return values, slots, dropped, held, rej, filterErr
}

// translation is a translated OTLP request: remote-write 1.0 requests,
// the samples, histograms and exemplars they hold, and what the
// translator refused.
type translation struct {
	chunks [][]byte
	total  int
	msg    string
}

// translate turns md into remote-write 1.0 bytes with Prometheus's
// translator, within a budget of otlpExpansion bytes per byte of the
// decoded body (at most an eighth of the in-flight bytes), held twice first: the
// translated request and its encoding.
// The request comes in chunks of at most -limits.max-series-per-request
// series: one OTLP histogram point is a series per bucket, so an SDK's
// export of a few thousand histograms is more series than the pusher
// takes in one request, and each chunk is then a request of its own.
// msg says what the translator refused (delta temporality, names it
// cannot build); its warnings are counted by category.
func (g *Gateway) translate(ctx context.Context, md pmetric.Metrics, size int) (tr translation, held int64, rej *reject) {
	budget := min(int64(otlpExpansion)*int64(size)+readStep, g.cfg.MaxInflightBytes/8)
	// The translated request, and then its encoding, no larger.
	held = 2 * budget
	if rej := g.hold(held); rej != nil {
		return tr, 0, rej
	}
	app := newWriteRequestAppender(int(budget))
	conv := prometheusremotewrite.NewPrometheusConverter(app)
	annots, err := conv.FromMetrics(ctx, md, g.cfg.OTLP.Settings())
	for category, n := range prometheusremotewrite.CountWarningsByCategory(annots) {
		g.otlp.warnings.WithLabelValues(string(category)).Add(float64(n))
	}
	if app.over {
		return tr, held, rejectf(http.StatusRequestEntityTooLarge, reasonTooLarge, "OTLP request of %d bytes would take more than %d bytes once translated to Prometheus series: send fewer points per request", size, budget)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		rej := rejectf(http.StatusServiceUnavailable, reasonReadBody, "translation stopped: %v", err)
		rej.retryAfter = 1
		return tr, held, rej
	}
	if err != nil {
		tr.msg = "translation: " + strings.ReplaceAll(err.Error(), "\n", "; ")
	}
	tr.total = app.points
	var merr error
	tr.chunks, merr = app.marshal(g.cfg.Limits.MaxSeriesPerRequest)
	if merr != nil {
		return tr, held, rejectf(http.StatusInternalServerError, reasonBadData, "%v", merr)
	}
	return tr, held, nil
}

// deltaPoints counts the data points the translator refuses for their
// temporality: Prometheus, by default, stores no delta sums or
// histograms, and neither does Ferry (convert them to cumulative in the
// Collector, with the deltatocumulative processor, or have the SDK
// export cumulative).
func deltaPoints(md pmetric.Metrics) int {
	n := 0
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		sms := rms.At(i).ScopeMetrics()
		for j := range sms.Len() {
			ms := sms.At(j).Metrics()
			for k := range ms.Len() {
				m := ms.At(k)
				switch {
				case m.Type() == pmetric.MetricTypeSum && m.Sum().AggregationTemporality() != pmetric.AggregationTemporalityCumulative:
					n += m.Sum().DataPoints().Len()
				case m.Type() == pmetric.MetricTypeHistogram && m.Histogram().AggregationTemporality() != pmetric.AggregationTemporalityCumulative:
					n += m.Histogram().DataPoints().Len()
				case m.Type() == pmetric.MetricTypeExponentialHistogram && m.ExponentialHistogram().AggregationTemporality() != pmetric.AggregationTemporalityCumulative:
					n += m.ExponentialHistogram().DataPoints().Len()
				}
			}
		}
	}
	return n
}

func joinMessages(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// writeOTLPResponse writes the 200 answer: an ExportMetricsServiceResponse
// in the request's encoding, with partial_success when part was refused.
func writeOTLPResponse(w http.ResponseWriter, enc string, out otlpOutcome) {
	resp := pmetricotlp.NewExportResponse()
	if out.rejected > 0 || out.message != "" {
		resp.PartialSuccess().SetRejectedDataPoints(int64(out.rejected))
		resp.PartialSuccess().SetErrorMessage(out.message)
	}
	var b []byte
	var err error
	if enc == otlpJSON {
		b, err = resp.MarshalJSON()
	} else {
		b, err = resp.MarshalProto()
	}
	if err != nil {
		http.Error(w, fmt.Sprintf("marshal response: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", enc)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}
