package pusher

import (
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// The contract with the storage lives in package backend, which backends
// import without importing this gRPC server. These names keep code written
// against the pusher package compiling; new code uses package backend.

// Backend is backend.Backend.
type Backend = backend.Backend

// RawPusher is backend.RawPusher.
type RawPusher = backend.RawPusher

// Result is backend.Result.
type Result = backend.Result

// ClientError is backend.ClientError.
type ClientError = backend.ClientError

// ServerError is backend.ServerError.
type ServerError = backend.ServerError

// Discard is backend.Discard.
type Discard = backend.Discard

var (
	// ErrOverloaded is backend.ErrOverloaded.
	ErrOverloaded = backend.ErrOverloaded
	// ErrShuttingDown is backend.ErrShuttingDown.
	ErrShuttingDown = backend.ErrShuttingDown
)

// Count is backend.Count.
func Count(req *prompb.WriteRequest) int64 { return backend.Count(req) }

// NewClientError is backend.NewClientError.
func NewClientError(format string, args ...any) *ClientError {
	return backend.NewClientError(format, args...)
}

// IsClientError is backend.IsClientError.
func IsClientError(err error) bool { return backend.IsClientError(err) }

// NewDiscard is backend.NewDiscard.
func NewDiscard() *Discard { return backend.NewDiscard() }
