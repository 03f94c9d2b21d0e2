// Package backend is the contract between the push service and the
// storage behind it: the Backend interface, the Result of a request, the
// two error classes a backend returns (ClientError: skip; ServerError or
// anything else: retry) and Classify, the one function that turns an error
// into a Class. Backends (tsdbstore, discard, remote write) import this
// package and neither the gRPC server nor its API (proto/ferry/v1): the
// server maps a Class onto its acknowledgement, and can depend on the
// backends through app wiring without a cycle.
package backend

import (
	"context"

	"github.com/prometheus/prometheus/storage"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// Backend applies write requests to storage. Implementations must be safe
// for concurrent use; the server never calls Push concurrently for the same
// tenant on one stream, but different streams may.
//
// A request and everything in it are the backend's to read only until Push
// returns. On a Push stream the label names and values, exemplar labels
// and metadata strings point into the request's encoded bytes, and the
// slices are windows on arrays; both are reused for later requests once
// the answer is sent. A backend that keeps anything beyond Push (labels
// in an index, a cache, a recorded request in a test) must copy it:
// strings.Clone, slices.Clone, or Marshal and Unmarshal the whole request.
// The tenant string is the backend's own and may be kept.
// The same holds for the error Push returns: build it with fmt, which
// copies, and do not put request strings in it as they are. Push may
// modify the request in place.
type Backend interface {
	// Push applies req for tenant. It returns nil when everything was
	// applied. When only part of the request was applied it returns the
	// counts together with a *ClientError; any other error is a server
	// error and the sender retries the whole request, so Push must be
	// idempotent for samples it already applied. req is valid only until
	// Push returns.
	Push(ctx context.Context, tenant string, req *prompb.WriteRequest) (Result, error)
	// Sync returns once everything pushed before the call is durable. It
	// reports how many tenants it flushed.
	Sync(ctx context.Context) (tenants int, err error)
	// Close flushes and releases the backend. Push and Sync must not be
	// called after Close.
	Close() error
}

// Querier is offered by a backend that can answer PromQL queries for a
// tenant: the pusher serves its HTTP query API (package queryapi) only when
// the backend implements it. tsdbstore.Store does; a backend that forwards
// data elsewhere (remote write) or keeps none (Discard) does not.
type Querier interface {
	// Queryable returns tenant's storage. For a tenant that never wrote it
	// returns an empty queryable rather than an error, so that querying an
	// unknown tenant answers "no data" like any empty Prometheus. tenant is
	// the raw header value: the implementation must treat it as untrusted
	// input (for example before using it in a file path).
	Queryable(tenant string) storage.Queryable
	// ExemplarQueryable returns tenant's exemplars, empty for a tenant
	// that never wrote.
	ExemplarQueryable(tenant string) storage.ExemplarQueryable
	// Metadata returns the latest metadata per metric family that tenant
	// sent; the caller may keep the map.
	Metadata(tenant string) map[string]prompb.MetricMetadata
}

// RawPusher is a Backend that can forward a request's encoded bytes as
// they came in, such as the remote-write backend: it then needs neither
// the decoded request nor to encode it again. The server calls PushRaw
// instead of Push when it has the bytes and has found that validation
// would remove nothing from them, so that applying raw is applying the
// request. It may not have decoded them at all (for a request in the shape
// Prometheus sends, one pass checks it): raw is the encoded WriteRequest,
// valid only until PushRaw returns, and samples the number of samples,
// histogram samples and exemplars it holds, for the Result. The rules of
// Push apply otherwise.
type RawPusher interface {
	PushRaw(ctx context.Context, tenant string, raw []byte, samples int64) (Result, error)
}

// BatchPusher is a Backend that can apply several requests of one tenant
// in one go, such as the TSDB store: one appender and one commit for all
// of them saves the per-commit cost (a WAL record, its write and the
// head's bookkeeping) that dominates small requests. The server hands a
// stream's queued requests of a tenant to PushBatch when the backend
// offers it; other backends get them one by one through Push.
//
// PushBatch applies reqs for tenant in the order given. Each request must
// be answered exactly as Push would have answered it had the requests
// been pushed one after another: out[i] gets the Result and error of
// reqs[i], and that error is nil or a *ClientError, so that one request's
// rejected samples do not fail the others. A failure that is not one
// request's own (the commit, the storage, the context, or a server error
// while appending any of them) is returned as the error of PushBatch: the
// batch then counts as not applied, out is to be ignored, and every
// request is answered with that server error and retried. Whatever part
// of the batch did reach storage, the retries are replays, which Push
// accepts as it must anyway (see Backend.Push).
//
// len(out) is len(reqs). The rules of Push on borrowed memory hold for
// every request, until PushBatch returns.
type BatchPusher interface {
	PushBatch(ctx context.Context, tenant string, reqs []*prompb.WriteRequest, out []Outcome) error
}

// TenantSyncer is a Backend that can make the writes of some tenants
// durable without the others', such as the TSDB store, whose durability
// is a file per tenant to fsync. A pusher serves many consumers, each
// writing its own partitions' tenants and syncing about once a second:
// syncing only the caller's tenants spares each Sync the others' files.
//
// SyncTenants returns once everything pushed for tenants before the call
// is durable, and reports how many tenants it flushed. It may make more
// durable than asked; tenants it never saw are nothing to sync.
type TenantSyncer interface {
	SyncTenants(ctx context.Context, tenants []string) (int, error)
}

// Outcome is what Push returns for one request: its counts, and nil or
// the *ClientError naming its first rejected sample.
type Outcome struct {
	Result Result
	Err    error
}

// Result counts the samples of one request. Samples, histogram samples and
// exemplars all count.
type Result struct {
	Accepted int64
	Rejected int64
}

// Add returns the sum of two results.
func (r Result) Add(o Result) Result {
	return Result{Accepted: r.Accepted + o.Accepted, Rejected: r.Rejected + o.Rejected}
}

// Count returns the number of samples, histogram samples and exemplars in
// req: what a Result of a fully accepted request adds up to.
func Count(req *prompb.WriteRequest) int64 {
	var n int64
	for i := range req.Timeseries {
		ts := &req.Timeseries[i]
		n += int64(len(ts.Samples) + len(ts.Histograms) + len(ts.Exemplars))
	}
	return n
}
