// Package tsdbstore is the "tsdb" backend of the pusher: it applies
// remote-write requests to one Prometheus TSDB per tenant.
//
// Each tenant gets its own TSDB under <-storage.path>/<tenant>, opened on the
// tenant's first write (or first read of existing data) and closed again
// after -storage.idle-timeout without writes, so an idle tenant costs no
// memory. Separate databases, rather than one database with a tenant label,
// keep tenants isolated for queries, limits and retention, and let a tenant's
// data be removed by deleting one directory. With -storage.tenancy=shared
// every tenant is kept in one TSDB instead, each series labelled with its
// tenant, for many small tenants whose fixed cost per TSDB would be most of
// the pusher's memory (shared.go, sharedquery.go).
//
// Errors follow the contract of package backend: a sample the TSDB refuses
// (out of order, too old, duplicate with another value, invalid histogram,
// over the series limit) is skipped and reported in a *backend.ClientError
// while the rest of the request is committed; a storage failure rejects the
// whole request as a server error so that the sender retries it. The
// mapping of storage errors onto these classes is in errors.go; what they
// mean for the acknowledgement is backend.Classify's alone. Retrying is safe because
// appending a sample that is already stored, with the same value, is accepted
// as a no-op (see Store.Push).
//
// Compaction and retention run inside each open TSDB exactly as in
// Prometheus, configured by -storage.block-duration and -storage.retention.
// A tenant closed for idleness is compacted, and its expired blocks deleted,
// when it is next opened.
//
// The accepted and rejected counts are exact as long as each series is
// written by one request at a time, which Ferry's per-tenant lanes ensure.
// Two requests appending to the same series concurrently are both checked
// against the data committed before them, so the TSDB may drop a sample of
// one of them at commit that was already counted as accepted.
//
// Metric metadata is kept in memory and, from Sync, in a metadata.json per
// tenant (see metadatafile.go); exemplars are kept in the TSDB's in-memory
// buffer and its WAL, as in Prometheus.
//
// Owners, each with its own state and locks (one concern per type):
//   - Store (store.go, query.go, status.go): the backend facade; it
//     holds the owners below together and holds no state of its own
//     beyond the storage root's lock (lock.go).
//   - registry (registry.go, registry_durability.go): the open TSDBs,
//     their references, the tenant limit and idle closing; tenantdb.go
//     is how the Store opens and closes one for it.
//   - writer (batch.go, request.go, exemplars.go, replay.go,
//     histogram.go, seriescache.go): the write path; a batch is one
//     appender and its commit, a request one write request in it, its
//     series found through the tenant's series cache.
//   - durability (durability.go, sync.go, wal.go, syncfs.go,
//     recover.go): Sync and its rounds (syncRounds), a tenant's sync and
//     the checks that find lost storage (wal.go), the tenants failed for
//     good by a failed writeback, and the recovery of lost storage.
//   - metadataStore (metadata.go, metadatafile.go): metric metadata.
//
// Also: shared.go and sharedquery.go (the shared tenancy), errors.go
// (storage errors onto the contract's classes), config.go, metrics.go,
// tsdbmetrics.go.
package tsdbstore
