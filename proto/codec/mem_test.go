package codec

import "google.golang.org/grpc/mem"

// mem1 wraps b as the single-buffer slice gRPC hands to a codec.
func mem1(b []byte) mem.BufferSlice {
	return mem.BufferSlice{mem.SliceBuffer(b)}
}

// frames splits b into HTTP/2-sized buffers, as gRPC hands a large
// message to the codec.
func frames(b []byte) mem.BufferSlice {
	const frame = 16 << 10
	var s mem.BufferSlice
	for len(b) > frame {
		s = append(s, mem.SliceBuffer(b[:frame]))
		b = b[frame:]
	}
	return append(s, mem.SliceBuffer(b))
}
