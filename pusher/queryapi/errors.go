package queryapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/prometheus/promql"
)

// errorType is the "errorType" field of an error response. The strings are
// Prometheus' own, because clients such as Grafana branch on them.
type errorType string

const (
	errorBadData      errorType = "bad_data"
	errorExec         errorType = "execution"
	errorTimeout      errorType = "timeout"
	errorCanceled     errorType = "canceled"
	errorInternal     errorType = "internal"
	errorUnauthorized errorType = "unauthorized"
	errorNotFound     errorType = "not_found"
	// errorMethodNotAllowed is not one of Prometheus' types (its router
	// answers a wrong method before the API sees it), but keeps the
	// answer in the API's shape.
	errorMethodNotAllowed errorType = "method_not_allowed"
)

// statusClientClosedRequest is nginx's non-standard code that Prometheus
// also uses for a request whose client went away.
const statusClientClosedRequest = 499

// apiError is a failed request: its type decides the HTTP status.
type apiError struct {
	typ errorType
	err error
}

func (e *apiError) Error() string { return fmt.Sprintf("%s: %s", e.typ, e.err) }

// httpStatus maps an error type to the status Prometheus answers with.
func (t errorType) httpStatus() int {
	switch t {
	case errorBadData:
		return http.StatusBadRequest
	case errorExec:
		return http.StatusUnprocessableEntity
	case errorCanceled:
		return statusClientClosedRequest
	case errorTimeout:
		return http.StatusServiceUnavailable
	case errorUnauthorized:
		return http.StatusUnauthorized
	case errorNotFound:
		return http.StatusNotFound
	case errorMethodNotAllowed:
		return http.StatusMethodNotAllowed
	default:
		return http.StatusInternalServerError
	}
}

func badData(err error) *apiError { return &apiError{errorBadData, err} }

// invalidParam words a parameter error the way Prometheus does, so users
// see the same message whichever server they query.
func invalidParam(name string, err error) *apiError {
	return badData(fmt.Errorf("invalid parameter %q: %w", name, err))
}

// execError classifies an error from evaluating a query or reading
// storage. Timeouts and cancellations get their own types so that clients
// can tell "try a smaller query" from "the query is wrong", and storage
// failures are internal because the user cannot fix them.
func execError(err error) *apiError {
	var (
		canceled promql.ErrQueryCanceled
		timeout  promql.ErrQueryTimeout
		storage  promql.ErrStorage
	)
	switch {
	case errors.As(err, &canceled):
		return &apiError{errorCanceled, err}
	case errors.As(err, &timeout):
		return &apiError{errorTimeout, err}
	case errors.As(err, &storage):
		return &apiError{errorInternal, err}
	case errors.Is(err, context.Canceled):
		return &apiError{errorCanceled, err}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{errorTimeout, err}
	}
	return &apiError{errorExec, err}
}

// constructionError classifies an error from building a query: waiting for
// a query slot can time out or be canceled, anything else is a bad query.
func constructionError(err error) *apiError {
	var (
		canceled promql.ErrQueryCanceled
		timeout  promql.ErrQueryTimeout
	)
	if errors.As(err, &canceled) || errors.As(err, &timeout) {
		return execError(err)
	}
	return invalidParam("query", err)
}
