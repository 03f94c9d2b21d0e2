package gateway

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"sync"
	"time"

	"github.com/klauspost/compress/snappy"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// The body of a remote-write request, from the connection to a decoded
// 1.0 request: read as it arrives, decompressed, decoded. Every step holds
// what it will allocate in the gateway's in-flight bytes
// (-gateway.max-inflight-bytes) before allocating it, so that what one
// client can make the gateway hold is bounded by what it sent.

// Version is the remote-write protocol version of a request.
type Version int

// The remote-write versions the gateway accepts.
const (
	V1 Version = 1
	V2 Version = 2
)

// The values of Content-Type's proto parameter.
const (
	protoV1 = "prometheus.WriteRequest"
	protoV2 = "io.prometheus.write.v2.Request"
)

// versionOf reads the protocol version from a request's Content-Type and
// Content-Encoding headers. A missing Content-Encoding is taken as snappy,
// the only encoding the remote-write specifications allow.
func versionOf(h http.Header) (Version, *reject) {
	if enc := h.Get("Content-Encoding"); enc != "" && enc != "snappy" {
		return 0, rejectf(http.StatusUnsupportedMediaType, reasonContentType, "unsupported Content-Encoding %q: remote write is snappy-compressed", enc)
	}
	ct := h.Get("Content-Type")
	if ct == "" {
		return 0, rejectf(http.StatusUnsupportedMediaType, reasonContentType, "missing Content-Type: want application/x-protobuf")
	}
	media, params, err := mime.ParseMediaType(ct)
	if err != nil || media != "application/x-protobuf" {
		return 0, rejectf(http.StatusUnsupportedMediaType, reasonContentType, "unsupported Content-Type %q: want application/x-protobuf", ct)
	}
	switch params["proto"] {
	case "", protoV1:
		return V1, nil
	case protoV2:
		return V2, nil
	}
	return 0, rejectf(http.StatusUnsupportedMediaType, reasonContentType, "unsupported proto %q: want %s or %s", params["proto"], protoV1, protoV2)
}

// readRequest reads a remote-write request's body into s: the protocol
// version from its headers, the compressed body (s.body) within the
// request's deadlines and -gateway.max-request-bytes, and its
// decompression (s.raw). Each is held in the in-flight bytes before it is
// allocated or as it arrives; held is what the caller releases, errors
// included.
func (g *Gateway) readRequest(w http.ResponseWriter, r *http.Request, s *scratch, start time.Time) (v Version, held int64, rej *reject) {
	v, rej = versionOf(r.Header)
	if rej != nil {
		return 0, 0, rej
	}
	rc := http.NewResponseController(w)
	// Errors mean the connection cannot take deadlines (HTTP/2 in tests
	// with a recorder); the server's own timeouts then apply.
	_ = rc.SetReadDeadline(start.Add(g.cfg.ReadTimeout))
	_ = rc.SetWriteDeadline(start.Add(g.cfg.WriteTimeout))
	s.body, held, rej = g.readBody(w, r, s.body)
	if rej != nil {
		return v, held, rej
	}
	raw, extra, rej := g.decompress(s.raw, s.body)
	held += extra
	if rej != nil {
		return v, held, rej
	}
	s.raw = raw
	return v, held, nil
}

// readStep is the least the body's buffer grows by, and so the most a
// client that has sent nothing yet holds of the in-flight bytes.
const readStep = 64 << 10

// readBody reads the compressed body within -gateway.max-request-bytes
// into buf (reused, grown when too small), holding in the in-flight bytes
// what has arrived, not what the client announced (readHeld). A client
// that announces a large body (or a chunked one) and then sends nothing
// therefore holds 64 KiB, and a thousand idle connections cannot spend
// the account that legitimate requests need. held is what the caller must
// release.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request, buf []byte) (body []byte, held int64, rej *reject) {
	limit := int64(g.cfg.MaxRequestBytes)
	if r.ContentLength > limit {
		return buf, 0, rejectf(http.StatusRequestEntityTooLarge, reasonTooLarge, "body of %d bytes is over the limit of %d (-gateway.max-request-bytes)", r.ContentLength, limit)
	}
	// One byte past the body's end, so the read that finds its end needs
	// no more room; past the limit, so MaxBytesReader can say it is over.
	end := limit + 1
	if r.ContentLength >= 0 {
		end = r.ContentLength + 1
	}
	body, held, err := g.readHeld(http.MaxBytesReader(w, r.Body, limit), buf, end)
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
	case errors.Is(err, errInflightFull):
		return body, held, g.overloaded()
	case errors.As(err, &tooLarge):
		return body, held, rejectf(http.StatusRequestEntityTooLarge, reasonTooLarge, "body is over the limit of %d bytes (-gateway.max-request-bytes)", limit)
	case errors.Is(err, errNoRoom):
		// Only a body longer than it said can get here.
		return body, held, badRequest(reasonReadBody, "read body: more than the %d bytes announced", r.ContentLength)
	default:
		return body, held, badRequest(reasonReadBody, "read body: %v", err)
	}
	g.metrics.bytes.WithLabelValues("snappy").Add(float64(len(body)))
	return body, held, nil
}

// errInflightFull and errNoRoom are readHeld's: the in-flight bytes had
// no room for the next step, or the reader has more than end bytes.
var (
	errInflightFull = errors.New("in-flight bytes full")
	errNoRoom       = errors.New("more bytes than room for")
)

// readHeld reads src to its end into buf (reused, grown when too small)
// and holds in the in-flight bytes what it read: before the buffer may
// take more, the room is held — the buffer doubling, by readStep at
// least, up to end bytes — so a reader holds at most about twice what it
// gave plus readStep, whatever it announced. held is what the caller
// must release, errors included.
func (g *Gateway) readHeld(src io.Reader, buf []byte, end int64) (out []byte, held int64, err error) {
	buf = buf[:0]
	for {
		if int64(len(buf)) == held {
			next := min(held+max(held, readStep), end)
			if next == held {
				return buf, held, errNoRoom
			}
			if !g.inflight.acquire(next - held) {
				return buf, held, errInflightFull
			}
			held = next
			if int64(cap(buf)) < held {
				grown := make([]byte, len(buf), held)
				copy(grown, buf)
				buf = grown
			}
		}
		n, err := src.Read(buf[len(buf):held])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, held, nil
		}
		if err != nil {
			return buf, held, err
		}
	}
}

// decompress decodes the body into dst (reused, grown when too small),
// holding its decoded size, read from snappy's header, in the in-flight
// bytes before anything is decompressed.
func (g *Gateway) decompress(dst, body []byte) ([]byte, int64, *reject) {
	n, err := snappy.DecodedLen(body)
	if err != nil {
		return nil, 0, badRequest(reasonBadBody, "body is not snappy-compressed: %v", err)
	}
	if n > g.cfg.MaxRequestBytes {
		return nil, 0, rejectf(http.StatusRequestEntityTooLarge, reasonTooLarge, "decompressed body of %d bytes is over the limit of %d (-gateway.max-request-bytes)", n, g.cfg.MaxRequestBytes)
	}
	if rej := g.hold(int64(n)); rej != nil {
		return nil, 0, rej
	}
	raw, rej := decompress(dst, body, g.cfg.MaxRequestBytes)
	if rej != nil {
		return nil, int64(n), rej
	}
	g.metrics.bytes.WithLabelValues("none").Add(float64(len(raw)))
	return raw, int64(n), nil
}

// hold takes n bytes of the in-flight account for a request: 503 with
// Retry-After while other requests hold too much of it, 413 when n alone
// is more than the whole account, which no retry can change.
func (g *Gateway) hold(n int64) *reject {
	if n > g.cfg.MaxInflightBytes {
		return rejectf(http.StatusRequestEntityTooLarge, reasonTooLarge, "request would hold %d bytes once decoded, more than -gateway.max-inflight-bytes (%d)", n, g.cfg.MaxInflightBytes)
	}
	if !g.inflight.acquire(n) {
		return g.overloaded()
	}
	return nil
}

func (g *Gateway) overloaded() *reject {
	rej := rejectf(http.StatusServiceUnavailable, reasonOverloaded, "gateway overloaded: over -gateway.max-inflight-bytes of requests in flight, retry later")
	rej.retryAfter = 1
	return rej
}

// decompress decodes a snappy block into dst (reused when large enough),
// refusing before any allocation a block whose header announces more than
// max bytes: a small hostile body must not make the gateway allocate its
// claimed size.
func decompress(dst, body []byte, max int) ([]byte, *reject) {
	n, err := snappy.DecodedLen(body)
	if err != nil {
		return nil, badRequest(reasonBadBody, "body is not snappy-compressed: %v", err)
	}
	if n > max {
		return nil, rejectf(http.StatusRequestEntityTooLarge, reasonTooLarge, "decompressed body of %d bytes is over the limit of %d (-gateway.max-request-bytes)", n, max)
	}
	out, err := snappy.Decode(grow(dst, n), body)
	if err != nil {
		return nil, badRequest(reasonBadBody, "body is not valid snappy: %v", err)
	}
	return out, nil
}

// inflight bounds the bytes of requests held in memory at once. Requests
// over the bound are refused at once instead of queued: a queue would hold
// the memory the bound is there to save, and the client retries anyway.
type inflight struct {
	mu    sync.Mutex
	limit int64
	used  int64
}

// acquire reserves n bytes and reports whether they fit.
func (f *inflight) acquire(n int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.used+n > f.limit {
		return false
	}
	f.used += n
	return true
}

// release returns n bytes reserved by acquire.
func (f *inflight) release(n int64) {
	f.mu.Lock()
	f.used -= n
	f.mu.Unlock()
}

// bytes returns the bytes reserved now.
func (f *inflight) bytes() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.used
}

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

// checkTopFields refuses a body whose top-level fields belong to the other
// protocol version. Without it a 2.0 body labelled 1.0 (or the reverse)
// would decode as an empty request, since each version's fields are
// unknown, and therefore skipped, in the other: its data would be lost
// under a 2xx answer.
func checkTopFields(b []byte, v Version) *reject {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return badRequest(reasonBadBody, "body is not a protobuf message: %v", protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return badRequest(reasonBadBody, "body is not a protobuf message: field %d: %v", num, protowire.ParseError(m))
		}
		switch {
		case v == V1 && (num == 4 || num == 5):
			return badRequest(reasonBadBody, "body has remote-write 2.0 fields (symbols, timeseries) but is labelled 1.0: send Content-Type application/x-protobuf;proto=%s", protoV2)
		case v == V2 && (num == 1 || num == 3):
			return badRequest(reasonBadBody, "body has remote-write 1.0 fields (timeseries, metadata) but is labelled 2.0 (proto=%s)", protoV2)
		}
		b = b[n+m:]
	}
	return nil
}
