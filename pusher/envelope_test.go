package pusher

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

func TestEnvelopeDecodesLikeTheGeneratedCode(t *testing.T) {
	full := pushRequest(7, "tenant-1", 3)
	full.Topic, full.Partition, full.Offset = "ingest", -2, 1<<40
	good, err := full.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// Unknown fields from a newer sender, and write_request split in two
	// occurrences, which protobuf merges.
	wr, _ := full.WriteRequest.Marshal()
	half := len(wr) / 2
	for half > 0 && !seriesBoundary(wr, half) {
		half--
	}
	split := protowire.AppendTag(nil, 1, protowire.VarintType)
	split = protowire.AppendVarint(split, 7)
	split = protowire.AppendTag(split, 99, protowire.BytesType)
	split = protowire.AppendString(split, "from the future")
	split = protowire.AppendTag(split, 2, protowire.BytesType)
	split = protowire.AppendString(split, "tenant-1")
	split = protowire.AppendTag(split, 6, protowire.BytesType)
	split = protowire.AppendBytes(split, wr[:half])
	split = protowire.AppendTag(split, 3, protowire.BytesType)
	split = protowire.AppendString(split, "ingest")
	split = protowire.AppendTag(split, 4, protowire.VarintType)
	minusTwo := int64(-2)
	split = protowire.AppendVarint(split, uint64(minusTwo))
	split = protowire.AppendTag(split, 5, protowire.VarintType)
	split = protowire.AppendVarint(split, 1<<40)
	split = protowire.AppendTag(split, 6, protowire.BytesType)
	split = protowire.AppendBytes(split, wr[half:])

	for name, raw := range map[string][]byte{"canonical": good, "split and with unknown fields": split} {
		var want ferryv1.PushRequest
		if err := want.Unmarshal(raw); err != nil {
			t.Fatalf("%s: generated Unmarshal: %v", name, err)
		}
		var env envelope
		if err := env.Unmarshal(raw); err != nil {
			t.Fatalf("%s: envelope: %v", name, err)
		}
		r := env.decode(decoding{})
		if r.bad != nil {
			t.Fatalf("%s: decode: %v", name, r.bad)
		}
		a, _ := r.req.Marshal()
		b, _ := want.Marshal()
		if !bytes.Equal(a, b) {
			t.Errorf("%s: envelope decoded %+v, generated code %+v", name, r.req, &want)
		}
		if r.size != len(wr) {
			t.Errorf("%s: size %d, want the write request's %d bytes", name, r.size, len(wr))
		}
		r.recycle()
	}
}

// seriesBoundary reports whether the first i bytes of an encoded
// WriteRequest end on a field boundary.
func seriesBoundary(b []byte, i int) bool {
	for off := 0; off < len(b); {
		if off == i {
			return true
		}
		_, _, n := protowire.ConsumeField(b[off:])
		if n < 0 {
			return false
		}
		off += n
	}
	return false
}

func TestUndecodableWriteRequestIsAClientErrorAndTheStreamGoesOn(t *testing.T) {
	h := startServer(t, testConfig(t), &stubBackend{})
	ctx := testContext(t)
	stream, err := h.client.Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bad := protowire.AppendTag(nil, 1, protowire.VarintType)
	bad = protowire.AppendVarint(bad, 41)
	bad = protowire.AppendTag(bad, 2, protowire.BytesType)
	bad = protowire.AppendString(bad, "t")
	bad = protowire.AppendTag(bad, 6, protowire.BytesType)
	bad = protowire.AppendBytes(bad, []byte{0x0a, 0xff, 0xff}) // a truncated time series
	msg := rawMessage(bad)
	if err := stream.SendMsg(&msg); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("the stream broke on an undecodable write request: %v", err)
	}
	if resp.RequestId != 41 || resp.Status != ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR {
		t.Fatalf("answer %+v, want CLIENT_ERROR for request 41", resp)
	}
	if err := stream.Send(pushRequest(42, "t", 1)); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); err != nil || resp.RequestId != 42 || resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
		t.Fatalf("next request on the same stream: %+v, %v; want OK for 42", resp, err)
	}
}

// rawMessage sends bytes as they are.
type rawMessage []byte

func (r *rawMessage) Size() int                                  { return len(*r) }
func (r *rawMessage) MarshalToSizedBuffer(b []byte) (int, error) { return copy(b, *r), nil }
func (r *rawMessage) Unmarshal(b []byte) error                   { *r = append((*r)[:0], b...); return nil }
