package consumer

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
	for _, r := range []pushRequest{
		{requestID: 1, tenant: "tenant-1", topic: "ingest", partition: 3, offset: 12345, value: value, sequence: 9},
		{sequence: math.MaxUint64, value: value},
		{value: value},
		{},
		{requestID: math.MaxUint64, tenant: "t", partition: -1, offset: -5, value: []byte{}},
		{partition: math.MaxInt32, offset: math.MaxInt64, value: value},
	} {
		var wr prompb.WriteRequest
		if err := wr.Unmarshal(r.value); err != nil {
			t.Fatal(err)
		}
		want, err := (&ferryv1.PushRequest{
			RequestId: r.requestID, Tenant: r.tenant, Topic: r.topic,
			Partition: r.partition, Offset: r.offset, WriteRequest: wr, Sequence: r.sequence,
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

// BenchmarkPushRequestMarshal is the consumer's cost to put a 100-series
// record on the stream; compare with BenchmarkMarshal in proto/codec.
func BenchmarkPushRequestMarshal(b *testing.B) {
	r := &pushRequest{requestID: 7, tenant: "tenant-1", topic: "ingest", partition: 1, offset: 99,
		value: loadgen.Shape{Series: 100, StartMs: 1_700_000_000_000, StepMs: 1000}.Marshal("tenant-1", 1)}
	buf := make([]byte, r.Size())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.MarshalToSizedBuffer(buf[:r.Size()]); err != nil {
			b.Fatal(err)
		}
	}
}
