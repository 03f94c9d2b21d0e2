package wire

import (
	"bytes"
	"math"
	"testing"

	"github.com/ferrylabs/ferry/internal/loadgen"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// TestPushRequestEncodesLikeTheGeneratedCode sends the record value as it
// came; the bytes must be those the generated code makes of the same
// request, so the pusher decodes it as any PushRequest.
func TestPushRequestEncodesLikeTheGeneratedCode(t *testing.T) {
	value := loadgen.Shape{Series: 3, StartMs: 1_700_000_000_000, StepMs: 1000}.Marshal("tenant-1", 4)
	for _, r := range []PushRequest{
		{RequestID: 1, Tenant: "tenant-1", Topic: "ingest", Partition: 3, Offset: 12345, Value: value, Sequence: 9},
		{Sequence: math.MaxUint64, Value: value},
		{Value: value},
		{},
		{RequestID: math.MaxUint64, Tenant: "t", Partition: -1, Offset: -5, Value: []byte{}},
		{Partition: math.MaxInt32, Offset: math.MaxInt64, Value: value},
	} {
		var wr prompb.WriteRequest
		if err := wr.Unmarshal(r.Value); err != nil {
			t.Fatal(err)
		}
		want, err := (&ferryv1.PushRequest{
			RequestId: r.RequestID, Tenant: r.Tenant, Topic: r.Topic,
			Partition: r.Partition, Offset: r.Offset, WriteRequest: wr, Sequence: r.Sequence,
		}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, r.Size())
		if _, err := r.MarshalToSizedBuffer(got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%+v:\n got %x\nwant %x", r, got, want)
		}
	}
}

// TestPushBatchEncodesLikeTheGeneratedCode checks that a batch of record
// values is the bytes the generated code makes of the same requests, and
// that BatchEnvelope reads those bytes back request by request, its
// envelopes reused from a longer message to a shorter one.
func TestPushBatchEncodesLikeTheGeneratedCode(t *testing.T) {
	value := loadgen.Shape{Series: 3, StartMs: 1_700_000_000_000, StepMs: 1000}.Marshal("tenant-1", 4)
	long := &PushBatch{Requests: []*PushRequest{
		{RequestID: 1, Tenant: "tenant-1", Topic: "ingest", Partition: 3, Offset: 12345, Value: value, Sequence: 9},
		{RequestID: 2, Tenant: "tenant-2", Value: []byte{}},
		{RequestID: 3, Tenant: "tenant-1", Offset: 12346, Value: bytes.Repeat(value, 50), Sequence: 10}, // a two-byte length and more
	}}
	var env BatchEnvelope
	for _, batch := range []*PushBatch{long, {}, {Requests: long.Requests[1:2]}} {
		want := &ferryv1.PushBatchRequest{}
		for _, r := range batch.Requests {
			var wr prompb.WriteRequest
			if err := wr.Unmarshal(r.Value); err != nil {
				t.Fatal(err)
			}
			want.Requests = append(want.Requests, &ferryv1.PushRequest{
				RequestId: r.RequestID, Tenant: r.Tenant, Topic: r.Topic,
				Partition: r.Partition, Offset: r.Offset, WriteRequest: wr, Sequence: r.Sequence,
			})
		}
		wantBytes, err := want.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, batch.Size())
		if _, err := batch.MarshalToSizedBuffer(got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, wantBytes) {
			t.Fatalf("%d requests:\n got %x\nwant %x", len(batch.Requests), got, wantBytes)
		}
		if err := env.Unmarshal(got); err != nil {
			t.Fatal(err)
		}
		if env.Len() != len(batch.Requests) {
			t.Fatalf("read %d requests, want %d", env.Len(), len(batch.Requests))
		}
		for i, r := range batch.Requests {
			e := env.At(i)
			if e.Request.RequestId != r.RequestID || e.Request.Tenant != r.Tenant || e.Request.Sequence != r.Sequence ||
				e.Request.Offset != r.Offset || !bytes.Equal(e.WriteRequest, r.Value) {
				t.Errorf("request %d read as %+v with %d bytes, want %+v", i, e.Request, len(e.WriteRequest), r)
			}
		}
	}
}

// TestPushBatchRefusesAWrongBuffer checks that marshalling into a buffer
// of the wrong size, or without sizing first, fails instead of writing a
// corrupt message.
func TestPushBatchRefusesAWrongBuffer(t *testing.T) {
	batch := &PushBatch{Requests: []*PushRequest{{RequestID: 1, Value: []byte{1, 2}}, {RequestID: 2}}}
	if _, err := batch.MarshalToSizedBuffer(make([]byte, 64)); err == nil {
		t.Error("marshalled without Size")
	}
	n := batch.Size()
	for _, size := range []int{n - 1, n + 1} {
		if _, err := batch.MarshalToSizedBuffer(make([]byte, size)); err == nil {
			t.Errorf("marshalled into %d bytes, want an error (size %d)", size, n)
		}
	}
}

// TestBatchEnvelopeRefusesAMalformedMessage checks that a truncated message
// or request is an error, not a short batch.
func TestBatchEnvelopeRefusesAMalformedMessage(t *testing.T) {
	batch := &PushBatch{Requests: []*PushRequest{{RequestID: 1, Tenant: "a", Value: []byte{1, 2}}}}
	b := make([]byte, batch.Size())
	if _, err := batch.MarshalToSizedBuffer(b); err != nil {
		t.Fatal(err)
	}
	var env BatchEnvelope
	if err := env.Unmarshal(b[:len(b)-1]); err == nil {
		t.Error("a truncated message was read")
	}
	inner := append([]byte{0x0a, byte(len(b) - 2 + 1)}, append(b[2:], 0x08)...) // a request ending inside a varint
	if err := env.Unmarshal(inner); err == nil {
		t.Error("a malformed request was read")
	}
}

// BenchmarkPushRequestMarshal is the consumer's cost to put a 100-series
// record on the stream; compare with BenchmarkMarshal in proto/codec.
func BenchmarkPushRequestMarshal(b *testing.B) {
	r := &PushRequest{RequestID: 7, Tenant: "tenant-1", Topic: "ingest", Partition: 1, Offset: 99,
		Value: loadgen.Shape{Series: 100, StartMs: 1_700_000_000_000, StepMs: 1000}.Marshal("tenant-1", 1)}
	buf := make([]byte, r.Size())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.MarshalToSizedBuffer(buf[:r.Size()]); err != nil {
			b.Fatal(err)
		}
	}
}
