package backend

import (
	"errors"
	"fmt"
	"time"
)

// ClientError is a request the pusher refuses because of its content or a
// tenant limit. Retrying the same request cannot succeed, so the consumer
// counts it and moves on.
type ClientError struct {
	// Reason is shown to the sender; it names the first offending series.
	Reason string
	// Cause is the underlying error, if any, for errors.Is.
	Cause error
}

// NewClientError returns a ClientError with a formatted reason.
func NewClientError(format string, args ...any) *ClientError {
	return &ClientError{Reason: fmt.Sprintf(format, args...)}
}

// Error implements error.
func (e *ClientError) Error() string { return e.Reason }

// Unwrap returns the cause.
func (e *ClientError) Unwrap() error { return e.Cause }

// IsClientError reports whether err, or an error it wraps, is a ClientError.
func IsClientError(err error) bool {
	var ce *ClientError
	return errors.As(err, &ce)
}

// ServerError is a failure of the pusher or its storage that a retry may cure:
// overload, shutdown, storage trouble. RetryAfter, when set, is a hint for
// the sender's backoff.
type ServerError struct {
	Reason     string
	RetryAfter time.Duration
	Cause      error
}

// Error implements error.
func (e *ServerError) Error() string { return e.Reason }

// Unwrap returns the cause.
func (e *ServerError) Unwrap() error { return e.Cause }

var (
	// ErrOverloaded is returned when the pusher is at its in-flight limit.
	// Its reason names the pusher: senders and tests match it.
	ErrOverloaded = &ServerError{Reason: "pusher: at the in-flight request limit", RetryAfter: 100 * time.Millisecond}
	// ErrShuttingDown is returned to requests that arrive during shutdown.
	ErrShuttingDown = &ServerError{Reason: "pusher: shutting down", RetryAfter: time.Second}
)

// defaultRetryAfter is the hint sent with a server error that carries none:
// long enough that a failing disk is not hammered, short enough that a
// transient fault costs little latency.
const defaultRetryAfter = 500 * time.Millisecond

// Class is what the outcome of a request asks of its sender. The push
// service turns it into the acknowledgement of its wire API (OK,
// CLIENT_ERROR, SERVER_ERROR); this package does not know that API, so
// that a backend links no gRPC.
type Class uint8

const (
	// ClassOK is a request applied.
	ClassOK Class = iota
	// ClassClient is a request that is bad or over a limit. Retrying it
	// cannot help: the sender counts it and moves on.
	ClassClient
	// ClassServer is a request that could not be applied now. The sender
	// retries it, never skips it.
	ClassServer
)

// String returns the class as the metrics and logs name it.
func (c Class) String() string {
	switch c {
	case ClassOK:
		return "ok"
	case ClassClient:
		return "client_error"
	case ClassServer:
		return "server_error"
	default:
		return fmt.Sprintf("class(%d)", uint8(c))
	}
}

// Classify decides the class of a request from the error its processing
// returned, and for a server error the sender's retry-after hint. It is
// the only place that decides retry-or-skip; backends only map their own
// errors onto ClientError and ServerError (see tsdbstore's requestError):
// nil is ClassOK, a ClientError is ClassClient, and everything else,
// including errors nobody anticipated, is ClassServer, because retrying an
// unknown failure can cost a duplicate but skipping it could lose data.
func Classify(err error) (class Class, retryAfter time.Duration) {
	if err == nil {
		return ClassOK, 0
	}
	if IsClientError(err) {
		return ClassClient, 0
	}
	var se *ServerError
	if errors.As(err, &se) && se.RetryAfter > 0 {
		return ClassServer, se.RetryAfter
	}
	return ClassServer, defaultRetryAfter
}
