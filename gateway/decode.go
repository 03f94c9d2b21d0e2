package gateway

import (
	"mime"
	"net/http"

	"github.com/klauspost/compress/snappy"
	"google.golang.org/protobuf/encoding/protowire"
)

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
