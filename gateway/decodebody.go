package gateway

import (
	"net/http"

	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/proto/wire"
)

// Decoding is where a small body becomes large: the wire format lets two
// bytes stand for a 96-byte series (1.0) or a 272-byte one (2.0, built
// and converted). Each version has one decoder and one bound, and the one
// ratio of them all is wire.MaxAllocFactor × wire.MaxDecodedBytes: at
// most 48 bytes allocated per decompressed byte (plus 12 KiB), garbage
// included. A 1.0 request is decoded by the pusher's own decoder, which
// keeps at most 16 per byte and allocates at most three times what it
// keeps; a 2.0 request's every allocation is counted before decoding
// (v2Cost) and admitted up to the same 48 per byte, since its arrays are
// sized to the counts and do not grow. What a request may cost is held in
// the gateway's in-flight bytes before anything is allocated for it.
// TestDecodersAllocateInProportionToTheirInput holds every decoder to the
// ratio with the most allocation per byte we could build.

// decode parses a decompressed body of version v into a 1.0 request,
// holding its cost in the in-flight bytes first; held is what the caller
// releases. checked says that the pusher's decoder (wire.Decoder)
// accepted raw, and so would the consumer's check of raw as a record
// value: the Decoder refuses all that check refuses.
func (g *Gateway) decode(raw []byte, v Version, s *scratch) (req *prompb.WriteRequest, checked bool, held int64, rej *reject) {
	if rej := checkTopFields(raw, v); rej != nil {
		return nil, false, 0, rej
	}
	if v == V1 {
		req, held, rej = g.decodeV1(raw, s)
		return req, rej == nil, held, rej
	}
	req, held, rej = g.decodeV2(raw, s)
	return req, false, held, rej
}

// decodeV1 decodes with the pusher's own decoder and limits: what it
// refuses, the pusher would refuse whole. It holds the decoder's budget
// (twice: its arrays grow by doubling) and the records' bytes while it
// decodes, and keeps only what the request took. The budget is the
// pusher's, 16 bytes per byte, but at most a quarter of the in-flight
// bytes, so that a large request of a real shape (1 to 6 bytes per byte)
// is decoded rather than refused for what a hostile one could take.
func (g *Gateway) decodeV1(raw []byte, s *scratch) (*prompb.WriteRequest, int64, *reject) {
	lim := g.cfg.Limits.Wire()
	lim.MaxDecodedBytes = int(g.cfg.MaxInflightBytes / 4)
	bound := 2*int64(lim.Budget(len(raw))) + int64(len(raw))
	if rej := g.hold(bound); rej != nil {
		return nil, 0, rej
	}
	s.dec.Limits = lim
	s.decoded = bound
	if err := s.dec.Decode(raw, &s.req); err != nil {
		return nil, bound, badRequest(reasonBadBody, "body is not a remote-write 1.0 WriteRequest the pusher accepts: %v", err)
	}
	keep := 2*int64(s.dec.Decoded()) + int64(len(raw))
	g.inflight.release(bound - keep)
	s.decoded = keep
	return &s.req, keep, nil
}

// decodeV2 counts what the 2.0 request will cost (v2Cost), refuses it
// over the bound, holds the cost, then converts it with the fast decoder
// or, when that declines, the generated one and fromV2.
func (g *Gateway) decodeV2(raw []byte, s *scratch) (*prompb.WriteRequest, int64, *reject) {
	lim := g.cfg.Limits.Wire()
	bound := wire.MaxAllocFactor * wire.MaxDecodedBytes(lim.MaxExpansion, len(raw))
	// The symbols' lengths are scratch the walk needs: held first.
	c, err := v2Symbols(raw)
	if err != nil {
		return nil, 0, badRequest(reasonBadBody, "%v", err)
	}
	// held stays held until the request is answered: the lengths
	// live in s until then.
	held := int64(c.symbols) * sizeInt
	if c.total() <= bound {
		if rej := g.hold(held); rej != nil {
			return nil, 0, rej
		}
		s.symbolLen = c.walk(raw, bound, s.symbolLen)
		err = c.err
	} else {
		held = 0
	}
	switch {
	case err != nil:
		return nil, held, badRequest(reasonBadBody, "%v", err)
	case c.cost > bound:
		return nil, held, badRequest(reasonBadBody, "remote-write 2.0 request of %d bytes would take more than %d bytes once decoded and converted to 1.0 (%d times its size: empty or repeated elements)", len(raw), bound, wire.MaxAllocFactor*lim.MaxExpansion)
	case lim.MaxSeries > 0 && c.series > lim.MaxSeries:
		return nil, held, badRequest(reasonBadBody, "%d series in one request, more than %d (-limits.max-series-per-request)", c.series, lim.MaxSeries)
	}
	if rej := g.hold(int64(c.cost)); rej != nil {
		return nil, held, rej
	}
	held += int64(c.cost)
	s.decoded = held
	req, rej := decodeV2(raw, s, c)
	if rej == nil {
		rej = checkSamplesPerSeries(req, lim.MaxSamplesPerSeries)
	}
	return req, held, rej
}

// decodeV2 converts raw, whose counts are c, to 1.0.
func decodeV2(raw []byte, s *scratch, c v2Counts) (*prompb.WriteRequest, *reject) {
	if !c.slow && s.dec2.decode(raw, &s.req, c) {
		return &s.req, nil
	}
	// Sized before: the generated decoder grows them by append, which
	// allocates about five times a large slice's final size.
	req2 := writev2.Request{Symbols: make([]string, 0, c.symbols), Timeseries: make([]writev2.TimeSeries, 0, c.series)}
	if err := req2.Unmarshal(raw); err != nil {
		return nil, badRequest(reasonBadBody, "body is not a remote-write 2.0 Request: %v", err)
	}
	req, err := fromV2(&req2, c.metadata)
	if err != nil {
		return nil, badRequest(reasonBadBody, "remote-write 2.0 request: %v", err)
	}
	return req, nil
}

// checkSamplesPerSeries refuses what the pusher's decoder would refuse in
// the records: a series with more than limit samples, histograms or
// exemplars.
func checkSamplesPerSeries(req *prompb.WriteRequest, limit int) *reject {
	for i := range req.Timeseries {
		ts := &req.Timeseries[i]
		if limit > 0 && max(len(ts.Samples), len(ts.Histograms), len(ts.Exemplars)) > limit {
			return rejectf(http.StatusBadRequest, reasonBadBody, "series %d has more than %d samples, histograms or exemplars (-limits.max-samples-per-series)", i, limit)
		}
	}
	return nil
}
