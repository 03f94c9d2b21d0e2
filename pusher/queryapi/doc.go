// Package queryapi serves the read side of the push service: the subset of
// the Prometheus HTTP API (/api/v1/query, query_range, series, labels,
// label values and status/buildinfo) that Grafana and promtool need, over
// the per-tenant TSDBs the pusher writes.
//
// Responses follow Prometheus' JSON format byte for byte where clients look
// at them (result types, timestamps as unix seconds, sample values as
// strings, error types and HTTP codes), so that an unmodified Prometheus data
// source works against Ferry. The package deliberately builds on promql,
// storage and model/labels instead of importing web/api/v1, which would pull
// in the web UI, the rule manager and scrape machinery.
//
// Every request names its tenant in the X-Scope-OrgID header, the convention
// of Cortex, Mimir and Thanos that Grafana already supports; each request
// reads only from that tenant's storage, so tenants cannot see each other.
package queryapi
