package codec

import "google.golang.org/grpc/mem"

// mem1 wraps b as the single-buffer slice gRPC hands to a codec.
func mem1(b []byte) mem.BufferSlice {
	return mem.BufferSlice{mem.SliceBuffer(b)}
}
