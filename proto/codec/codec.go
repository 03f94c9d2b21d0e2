// Package codec is Ferry's gRPC codec: it marshals gogo-generated messages
// with their own generated methods and hands every other message to gRPC's
// default protobuf codec.
//
// gRPC's default codec accepts gogo messages only through protobuf-go's
// legacy wrapper, which reflects over the Go struct and marshals every
// message twice (once to size it). The generated Size/MarshalToSizedBuffer/
// Unmarshal methods do the same work in one pass without reflection. Health
// checks and server reflection use protobuf-go messages, so those still need
// the default codec: that is the fallback.
package codec

import (
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// Name is the codec's content subtype. It is "proto" so that peers that do
// not use this codec (grpcurl, other languages) interoperate unchanged.
const Name = proto.Name

// gogoMessage is what gogofaster generates for every message.
type gogoMessage interface {
	Size() int
	MarshalToSizedBuffer(dAtA []byte) (int, error)
	Unmarshal(dAtA []byte) error
}

// Codec implements encoding.CodecV2. The zero value is not usable; use New.
type Codec struct {
	fallback encoding.CodecV2
}

// New returns a codec that falls back to the codec registered under "proto"
// when New is called (gRPC's default unless something replaced it).
func New() Codec {
	return Codec{fallback: encoding.GetCodecV2(proto.Name)}
}

// ServerOption makes a gRPC server use the codec for every call.
func ServerOption() grpc.ServerOption {
	return grpc.ForceServerCodecV2(New())
}

// DialOption makes a gRPC client use the codec for every call.
func DialOption() grpc.DialOption {
	return grpc.WithDefaultCallOptions(grpc.ForceCodecV2(New()))
}

// Name returns the content subtype, "proto".
func (Codec) Name() string { return Name }

// Marshal encodes v. Gogo messages are written straight into a pooled
// buffer (dirtyPool), small ones too: a buffer of gRPC's own below its
// pooling threshold costs two allocations (the bytes and the interface
// holding them), and at 10-series records the consumer sends a message and
// receives an answer of that size per record or two.
func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(gogoMessage)
	if !ok {
		return c.fallback.Marshal(v)
	}
	size := m.Size()
	if size == 0 {
		buf := make([]byte, size)
		if _, err := m.MarshalToSizedBuffer(buf); err != nil {
			return nil, fmt.Errorf("codec: marshal %T: %w", v, err)
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	buf := marshalPool.Get(size)
	n, err := m.MarshalToSizedBuffer((*buf)[:size])
	if err == nil && n != size {
		// The buffer is not cleared: bytes not written would be an earlier
		// message's.
		err = fmt.Errorf("wrote %d bytes of %d", n, size)
	}
	if err != nil {
		marshalPool.Put(buf)
		return nil, fmt.Errorf("codec: marshal %T: %w", v, err)
	}
	return mem.BufferSlice{mem.NewBuffer(buf, marshalPool)}, nil
}

// Unmarshal decodes data into v. Gogo's generated Unmarshal (and
// wire.Envelope's) copies what it keeps out of its input, so the input is
// only borrowed for the call: a message that came in one buffer is read
// where it lies, one that came in several HTTP/2 frames is joined in
// pooled scratch. gRPC's own pool is not used for that join: it hands out
// its size classes (1 MiB for a 500 KB message) cleared on every Get,
// which cost a profiled pusher 3% of its CPU for bytes that are
// overwritten at once.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(gogoMessage)
	if !ok {
		return c.fallback.Unmarshal(data, v)
	}
	if len(data) == 1 {
		return unmarshal(m, data[0].ReadOnlyData())
	}
	sp := scratch.Get().(*[]byte)
	defer scratch.Put(sp)
	n := data.Len()
	if cap(*sp) < n {
		*sp = make([]byte, n)
	}
	b := (*sp)[:n]
	data.CopyTo(b)
	return unmarshal(m, b)
}

// scratch holds the buffers Unmarshal joins frames in.
var scratch = sync.Pool{New: func() any { return new([]byte) }}

func unmarshal(m gogoMessage, b []byte) error {
	if err := m.Unmarshal(b); err != nil {
		return fmt.Errorf("codec: unmarshal %T: %w", m, err)
	}
	return nil
}
