package codec

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ferrylabs/ferry/internal/loadgen"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/wire"
)

func pushRequest(series int) *ferryv1.PushRequest {
	sh := loadgen.Shape{Series: series, StartMs: 1_700_000_000_000, StepMs: 15_000}
	return &ferryv1.PushRequest{
		RequestId:    42,
		Tenant:       "tenant-1",
		Topic:        "ingest",
		Partition:    3,
		Offset:       1234,
		WriteRequest: *sh.Request("tenant-1", 7),
	}
}

func TestGogoRoundTrip(t *testing.T) {
	for _, series := range []int{0, 1, 100, 2000} { // 2000 series is above the pooling threshold
		c := New()
		in := pushRequest(series)
		data, err := c.Marshal(in)
		if err != nil {
			t.Fatalf("series=%d: marshal: %v", series, err)
		}
		want, _ := in.Marshal()
		if got := data.Materialize(); string(got) != string(want) {
			t.Fatalf("series=%d: codec bytes differ from the generated Marshal", series)
		}
		var out ferryv1.PushRequest
		if err := c.Unmarshal(data, &out); err != nil {
			t.Fatalf("series=%d: unmarshal: %v", series, err)
		}
		data.Free()
		again, _ := out.Marshal()
		if string(again) != string(want) || out.Offset != in.Offset || len(out.WriteRequest.Timeseries) != series {
			t.Fatalf("series=%d: round trip changed the message", series)
		}
	}
}

func TestUnmarshalErrorIsWrapped(t *testing.T) {
	c := New()
	var out ferryv1.PushRequest
	err := c.Unmarshal(mem1([]byte{0x0a, 0xff}), &out)
	if err == nil {
		t.Fatal("want an error for a truncated message")
	}
}

func TestFallsBackForProtobufGo(t *testing.T) {
	c := New()
	in := &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}
	data, err := c.Marshal(in)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var out healthpb.HealthCheckResponse
	if err := c.Unmarshal(data, &out); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	if out.Status != in.Status {
		t.Fatalf("status = %v, want %v", out.Status, in.Status)
	}
	if c.Name() != "proto" {
		t.Fatalf("name = %q, want proto", c.Name())
	}
}

// BenchmarkMarshal compares this codec with gRPC's default on a 100-series
// request; run with -benchmem and compare the two sub-benchmarks.
func BenchmarkMarshal(b *testing.B) {
	msg := pushRequest(100)
	for _, bc := range []struct {
		name  string
		codec encoding.CodecV2
	}{
		{"codec=gogo", New()},
		{"codec=default", encoding.GetCodecV2(proto.Name)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data, err := bc.codec.Marshal(msg)
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		})
	}
}

// BenchmarkUnmarshal compares decoding a 100-series request.
func BenchmarkUnmarshal(b *testing.B) {
	raw, _ := pushRequest(100).Marshal()
	for _, bc := range []struct {
		name  string
		codec encoding.CodecV2
	}{
		{"codec=gogo", New()},
		{"codec=default", encoding.GetCodecV2(proto.Name)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				var out ferryv1.PushRequest
				if err := bc.codec.Unmarshal(mem1(raw), &out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestUnmarshalOfFrames decodes messages that came in several frames one
// after the other, a smaller one after a larger one: they are joined in
// reused scratch, which must be cut to each message's size, and a decoded
// message must keep nothing of it (a reference into it would change when
// the next message is decoded).
func TestUnmarshalOfFrames(t *testing.T) {
	c := New()
	var first ferryv1.PushRequest
	var want []byte
	for i, series := range []int{2000, 300, 2000} {
		in := pushRequest(series)
		in.Tenant = fmt.Sprintf("tenant-%d", i)
		raw, err := in.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		data := frames(raw)
		if len(data) < 2 {
			t.Fatalf("a %d-byte message is %d frame(s): the test needs several", len(raw), len(data))
		}
		var out ferryv1.PushRequest
		if err := c.Unmarshal(data, &out); err != nil {
			t.Fatalf("message %d (%d series): unmarshal: %v", i, series, err)
		}
		if got, _ := out.Marshal(); string(got) != string(raw) {
			t.Fatalf("message %d (%d series): decoded message differs from the one sent", i, series)
		}
		if i == 0 {
			first, want = out, raw
		}
	}
	if got, _ := first.Marshal(); string(got) != string(want) || first.Tenant != "tenant-0" {
		t.Fatalf("the first message changed when later ones were decoded (tenant %q)", first.Tenant)
	}
}

// envelope is the pusher's receive-only message: wire.Envelope with the
// methods that make it a gogo message to the codec.
type envelope struct{ wire.Envelope }

func (*envelope) Size() int                                  { return 0 }
func (*envelope) MarshalToSizedBuffer(b []byte) (int, error) { return 0, nil }

// BenchmarkUnmarshalFrames decodes what a pusher's stream receives most:
// a 2,000-series request that arrived in 16 KiB frames, into the pusher's
// envelope (which copies the write request out).
func BenchmarkUnmarshalFrames(b *testing.B) {
	raw, _ := pushRequest(2000).Marshal()
	data := frames(raw)
	c := New()
	var env envelope
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Unmarshal(data, &env); err != nil {
			b.Fatal(err)
		}
	}
}
