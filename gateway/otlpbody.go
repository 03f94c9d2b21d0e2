package gateway

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/klauspost/compress/gzip"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
)

// otlpDecodeFactor bounds what decoding an OTLP body into pdata allocates
// per byte of the decompressed body, garbage included, held in the
// in-flight bytes before decoding: pdata keeps a struct of 50 to 150 bytes
// per message and grows its slices by doubling, so the worst bodies,
// empty data points or metrics of two bytes each, take about 70 times
// their size (TestAnOTLPBodyOfEmptyPointsDecodesWithinItsFactor measures
// every shape), and a real one, whose points carry attributes, a few
// times. Held before decoding, this makes the largest OTLP body the
// gateway takes -gateway.max-inflight-bytes / 80 decompressed (3.2 MiB at
// the default), above what SDKs and Collectors send in one export; a
// larger one is answered 413. JSON is held at otlpJSONDecodeFactor.
const otlpDecodeFactor = 80

// otlpJSONDecodeFactor is otlpDecodeFactor for JSON bodies: an empty
// exemplar is 3 bytes of JSON ("{},") and a 400-byte struct, about 135
// bytes per byte measured, so the largest JSON export is the in-flight
// bytes / 160 (1.6 MiB at the default). Real JSON, with its field names
// spelled out, takes far less per byte than protobuf.
const otlpJSONDecodeFactor = 160

// The OTLP/HTTP encodings, by Content-Type.
const (
	otlpProtobuf = "application/x-protobuf"
	otlpJSON     = "application/json"
)

// otlpEncodingOf reads the body's encoding (Content-Type) and compression
// (Content-Encoding, gzip or none) from h. On error the encoding is still
// protobuf, the one the answer's body then takes.
func otlpEncodingOf(h http.Header) (enc string, gzipped bool, rej *reject) {
	media, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	switch {
	case err == nil && (media == otlpProtobuf || media == otlpJSON):
		enc = media
	default:
		return otlpProtobuf, false, rejectf(http.StatusUnsupportedMediaType, reasonContentType, "unsupported Content-Type %q: OTLP/HTTP is %s or %s", h.Get("Content-Type"), otlpProtobuf, otlpJSON)
	}
	switch ce := h.Get("Content-Encoding"); ce {
	case "", "identity":
		return enc, false, nil
	case "gzip":
		return enc, true, nil
	default:
		return enc, false, rejectf(http.StatusUnsupportedMediaType, reasonContentType, "unsupported Content-Encoding %q: OTLP/HTTP bodies are gzip or uncompressed", ce)
	}
}

// gunzip inflates body into dst (reused, grown when too small) within
// -gateway.max-request-bytes, holding in the in-flight bytes what it
// inflated before its buffer grows, as readBody does: the decompressor
// reads through a LimitReader one byte past the limit, so a small body
// that inflates to gigabytes costs the limit and is answered 413. held is
// what the caller must release.
func (g *Gateway) gunzip(dst, body []byte) (raw []byte, held int64, rej *reject) {
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return dst, 0, badRequest(reasonBadBody, "body is not gzip: %v", err)
	}
	limit := int64(g.cfg.MaxRequestBytes)
	// One byte past the limit, so that a body inflating past it is seen.
	buf, held, err := g.readHeld(io.LimitReader(zr, limit+1), dst, limit+2)
	switch {
	case err == nil && int64(len(buf)) <= limit:
	case err == nil || errors.Is(err, errNoRoom):
		return buf, held, rejectf(http.StatusRequestEntityTooLarge, reasonTooLarge, "body inflates to more than the limit of %d bytes (-gateway.max-request-bytes)", limit)
	case errors.Is(err, errInflightFull):
		return buf, held, g.overloaded()
	default:
		return buf, held, badRequest(reasonBadBody, "body is not valid gzip: %v", err)
	}
	g.metrics.bytes.WithLabelValues("none").Add(float64(len(buf)))
	return buf, held, nil
}

// unmarshalOTLP decodes raw, of encoding enc, holding what decoding may
// allocate first; held is what the caller must release.
func (g *Gateway) unmarshalOTLP(raw []byte, enc string) (pmetricotlp.ExportRequest, int64, *reject) {
	factor := int64(otlpDecodeFactor)
	if enc == otlpJSON {
		factor = otlpJSONDecodeFactor
	}
	held := factor * int64(len(raw))
	if rej := g.hold(held); rej != nil {
		return pmetricotlp.ExportRequest{}, 0, rej
	}
	req := pmetricotlp.NewExportRequest()
	var err error
	if enc == otlpJSON {
		err = req.UnmarshalJSON(raw)
	} else {
		err = req.UnmarshalProto(raw)
	}
	if err != nil {
		return req, held, badRequest(reasonBadBody, "body is not an OTLP ExportMetricsServiceRequest (%s): %v", enc, err)
	}
	return req, held, nil
}
