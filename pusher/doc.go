// Package pusher is Ferry's push service, the gRPC server the consumers
// stream their records to. Each PushRequest arrives with its write request
// still encoded (the consumer forwards the Kafka record's bytes): the
// stream reads the envelope first and decodes the write request into pooled
// memory second (proto/wire), so that a request that does not decode is
// answered CLIENT_ERROR alone instead of ending the stream. Requests that
// carry a sequence are applied one at a time per tenant, in the order
// received (sequencer); storage-free checks (limits.Limits.Filter) drop
// invalid series; the rest goes to a backend.Backend, backend.Classify
// classes the outcome, and the server answers the class OK, CLIENT_ERROR
// or SERVER_ERROR. Each stream kind has one reader loop (readPush,
// readBatches: receive, admit, hand on), and its answers go out through
// an outbox, which holds those of a PushBatch message being read. Sync makes
// everything answered before it durable, which the consumer waits for
// before it commits offsets.
//
// The contract with storage lives in package backend, which backends
// import; this package only serves it. Package app wires a Server to the
// backend chosen by -pusher.backend, and serves the query API when that
// backend is a backend.Querier.
package pusher
