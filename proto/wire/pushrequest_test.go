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
