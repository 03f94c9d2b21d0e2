package tsdbstore

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/ferrylabs/ferry/pusher/backend"
)

var (
	// errSeriesLimit rejects a sample that would create a series beyond
	// -limits.max-series-per-tenant.
	errSeriesLimit = errors.New("per-tenant series limit reached")
	// errTooFarInFuture rejects a sample beyond -limits.creation-grace-period:
	// once stored it would make every later sample of its series out of order.
	errTooFarInFuture = errors.New("timestamp too far in the future")
	// errInvalidHistogram rejects a histogram whose protobuf fields
	// contradict each other before the TSDB's own validation sees it.
	errInvalidHistogram = errors.New("invalid native histogram")
	// errInvalidTenant rejects a tenant ID that cannot name a directory.
	errInvalidTenant = errors.New("invalid tenant ID")
	// errTenantLimit refuses a write for a tenant not open while
	// -pusher.max-tenants tenants are (active, in the shared tenancy). It
	// is a capacity condition, not bad data, so it is a server error with
	// a retry-after hint (capacityError): the data is fine and the tenant
	// is admitted once an idle tenant closes. Skipping it as a client
	// error would lose records nothing else refused: the gateway cannot
	// know which tenants a pusher has open (several pushers may serve its
	// topic, and tenants close by idleness), so it answered 2xx for them,
	// and the records stay in Kafka until the consumer commits past them.
	// A server error stops the commit there; the consumer retries the
	// tenant's requests and parks its lane meanwhile, so other tenants go
	// on.
	errTenantLimit = errors.New("open tenant limit reached")
	// errReservedLabel rejects a series that carries the label the shared
	// TSDB names its tenants by.
	errReservedLabel = errors.New("reserved label")
	// errTooOld rejects a sample older than -limits.past-grace-period.
	errTooOld = errors.New("timestamp too far in the past")
)

// diskFullRetryAfter is the backoff hint when the disk is full: freeing space
// takes an operator or a compaction, so hammering the disk twice a second
// helps nobody.
const diskFullRetryAfter = 10 * time.Second

// errClass is the verdict on one error.
type errClass struct {
	// client is true when the error is caused by the data or a tenant
	// limit, so retrying the same data cannot succeed.
	client bool
	// code labels the rejected-samples metric; "" for server errors.
	code string
	// what describes the problem in a ClientError reason.
	what string
}

// classify maps an error the TSDB or this package's limits return onto the
// contract's classes: the sender's fault (a client error: the sample is
// skipped and counted by code) or the store's (a server error). It only
// translates storage errors; backend.Classify alone turns the resulting
// ClientError or ServerError into an acknowledgement. Anything it does not
// recognise maps to a server error: retrying an unknown failure may cost a
// duplicate, skipping it could lose data.
func classify(err error) errClass {
	client := func(code, what string) errClass { return errClass{client: true, code: code, what: what} }
	var histErr histogram.Error
	switch {
	case err == nil:
		return errClass{}
	case errors.Is(err, errInvalidTenant):
		return client("invalid_tenant", "invalid tenant ID")
	case errors.Is(err, errReservedLabel):
		return client("reserved_label", "label reserved for the shared tenancy")
	case errors.Is(err, errTooOld):
		return client("too_far_in_past", "sample too far in the past")
	case errors.Is(err, errSeriesLimit):
		return client("series_limit", "per-tenant series limit reached")
	case errors.Is(err, errTooFarInFuture):
		return client("too_far_in_future", "sample too far in the future")
	case errors.Is(err, storage.ErrOutOfOrderSample):
		return client("out_of_order", "out-of-order sample")
	case errors.Is(err, storage.ErrOutOfBounds):
		// Older than the head block: that time range is already, or about
		// to be, written to an immutable block.
		return client("out_of_bounds", "sample older than the head block")
	case errors.Is(err, storage.ErrTooOldSample):
		return client("too_old", "sample older than the out-of-order window")
	case errors.Is(err, storage.ErrDuplicateSampleForTimestamp):
		return client("duplicate_timestamp", "duplicate sample for timestamp with a different value")
	case errors.As(err, &histErr), errors.Is(err, errInvalidHistogram):
		return client("invalid_histogram", "invalid native histogram")
	case errors.Is(err, storage.ErrNativeHistogramsDisabled):
		return client("native_histograms_disabled", "native histograms are disabled")
	case errors.Is(err, tsdb.ErrInvalidSample):
		return client("invalid_sample", "invalid sample")
	case errors.Is(err, storage.ErrOutOfOrderST), errors.Is(err, storage.ErrSTNewerThanSample):
		return client("invalid_start_timestamp", "invalid start timestamp")
	case errors.Is(err, storage.ErrOutOfOrderExemplar):
		return client("exemplar_out_of_order", "out-of-order exemplar")
	case errors.Is(err, storage.ErrDuplicateExemplar):
		// The TSDB swallows exact duplicates; this is the rest.
		return client("exemplar_duplicate", "duplicate exemplar")
	case errors.Is(err, storage.ErrExemplarLabelLength):
		return client("exemplar_labels_too_long", "exemplar labels too long")
	case errors.Is(err, tsdb.ErrInvalidExemplar):
		return client("exemplar_invalid", "invalid exemplar")
	case errors.Is(err, storage.ErrExemplarsDisabled):
		return client("exemplars_disabled", "exemplar storage is disabled")
	case errors.Is(err, storage.ErrNotFound):
		// Only AppendExemplars returns it here: the series has no sample
		// in the head, so there is nothing to attach the exemplar to.
		return client("exemplar_unknown_series", "exemplar for a series without samples")
	default:
		// tsdb.ErrClosed, tsdb.ErrNotReady, tsdb.ErrAppenderClosed, WAL
		// write and fsync failures, full disks, canceled contexts, ...
		return errClass{}
	}
}

// capacityTenantLimit is the cause label of the capacity-refusals metric
// for errTenantLimit.
const capacityTenantLimit = "tenant_limit"

// requestError wraps an error that fails a whole request into the
// contract's error types, so that backend.Classify acknowledges it
// correctly.
func requestError(op string, err error) error {
	if err == nil {
		return nil
	}
	if c := classify(err); c.client {
		return &backend.ClientError{Reason: fmt.Sprintf("tsdb %s: %v", op, err), Cause: err}
	}
	var se *backend.ServerError
	if errors.As(err, &se) {
		return fmt.Errorf("tsdb %s: %w", op, err)
	}
	var retryAfter time.Duration // 0: backend.Classify's default hint.
	if errors.Is(err, syscall.ENOSPC) {
		retryAfter = diskFullRetryAfter
	}
	return &backend.ServerError{Reason: fmt.Sprintf("tsdb %s: %v", op, err), RetryAfter: retryAfter, Cause: err}
}
