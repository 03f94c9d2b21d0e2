package gateway

import (
	"fmt"
	"net/http"
)

// Reasons a request is rejected, the values of the rejected metric's reason
// label.
const (
	reasonContentType  = "unsupported_media_type"
	reasonTooLarge     = "too_large"
	reasonBadBody      = "bad_body"
	reasonBadData      = "bad_data"
	reasonNoTenant     = "missing_tenant"
	reasonBadTenant    = "invalid_tenant"
	reasonRateLimited  = "rate_limited"
	reasonOverloaded   = "inflight_bytes"
	reasonKafka        = "kafka"
	reasonReadBody     = "read_body"
	reasonRecordTooBig = "series_too_large"
)

// reject is a request's refusal: the HTTP status, the reason counted and a
// message for the client.
type reject struct {
	status     int
	reason     string
	msg        string
	retryAfter int // seconds, for 429 and 503
}

func (r *reject) Error() string { return r.msg }

func rejectf(status int, reason, format string, args ...any) *reject {
	return &reject{status: status, reason: reason, msg: fmt.Sprintf(format, args...)}
}

func badRequest(reason, format string, args ...any) *reject {
	return rejectf(http.StatusBadRequest, reason, format, args...)
}
