// Package wire reads and writes the protobuf messages on Ferry's hot paths
// by hand, where the generated (gogo) code would allocate or copy:
//
//   - ValidateWriteRequest (consumer) checks that a Kafka record value is a
//     well-formed remote-write WriteRequest without building it.
//   - PushRequest (consumer) wraps the record's bytes, unchanged, in a
//     ferry.v1.PushRequest, and PushBatch several of them in one message
//     (pushrequest.go).
//   - Envelope (pusher) reads a PushRequest's envelope fields and keeps its
//     write request encoded, so that a bad write request is one request's
//     client error rather than the end of the stream; BatchEnvelope reads
//     a PushBatch so, request by request (envelope.go).
//   - Decoder (pusher) decodes a WriteRequest into reused memory.
//
// Each must agree with the generated code in package proto/prompb or
// proto/ferry/v1; the differential tests and fuzz targets next to them
// compare the two. The field readers come in two families, because the two
// references differ in corners: field.go follows protowire's rules
// (validation, envelope), generated.go the gogo decoder's (Decoder).
package wire
