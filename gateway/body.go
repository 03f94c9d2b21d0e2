package gateway

import (
	"errors"
	"io"
	"net/http"
)

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
