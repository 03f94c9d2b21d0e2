package gateway

import (
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/proto/wire"
)

// maxPooledBytes bounds the buffers a scratch keeps for the next request:
// a rare huge request should not pin its memory after it is answered,
// outside the in-flight bound. Remote-write bodies of the default 2,000
// samples per request are a few hundred kilobytes.
const maxPooledBytes = 4 << 20

// scratch is the memory one request is read, decompressed and decoded
// into, kept from one request to the next: allocating the body, its
// decoded bytes and a string per label for every request, only to drop
// them a millisecond later, cost more CPU in the allocator and the garbage
// collector than the checks themselves.
//
// A scratch belongs to one request at a time. The decoded request's
// strings point into raw, and a record value may be raw itself, so a
// scratch goes back to the pool only once nothing can read it any more:
// not after a produce that may leave records in flight.
type scratch struct {
	body []byte       // the compressed body
	raw  []byte       // the decompressed body
	dec  wire.Decoder // decodes raw into req
	dec2 v2Decoder    // decodes a 2.0 raw into req
	// symbolLen is v2Cost's scratch: the lengths of a 2.0 request's symbols.
	symbolLen []int
	// decoded is what the last decode held in the in-flight bytes: the
	// decoders' arrays are about that large.
	decoded int64
	req     prompb.WriteRequest // the decoded request, windows on dec's or dec2's arrays

	out    []byte   // re-encoded record values, one after another
	values [][]byte // the record values, windows on raw or out
	sizes  []int    // encoded sizes of the series and metadata being split

	// A sharded tenant's request (shard.go, splitShards): the slot of each
	// series, the series' indexes slot by slot, the slot of each value.
	digest     xxhash.Digest
	slots      []int
	order      []int
	valueSlots []int
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func getScratch() *scratch { return scratchPool.Get().(*scratch) }

// put returns s to the pool, dropping buffers too large to keep. The
// decoder's arrays are bounded by the decoded size of a body under the
// same limit.
func (s *scratch) put() {
	if cap(s.body) > maxPooledBytes {
		s.body = nil
	}
	if cap(s.raw) > maxPooledBytes || s.decoded > maxPooledBytes {
		// A decoder's arrays may hold 16 times the body: one hostile
		// request must not leave them pooled, outside the in-flight bound.
		s.raw, s.dec, s.dec2, s.symbolLen = nil, wire.Decoder{}, v2Decoder{}, nil
	}
	s.decoded = 0
	if cap(s.symbolLen) > maxPooledBytes/8 {
		s.symbolLen = nil
	}
	if cap(s.out) > maxPooledBytes {
		s.out = nil
	}
	if cap(s.order) > maxPooledBytes/8 {
		s.slots, s.order = nil, nil
	}
	s.req = prompb.WriteRequest{}
	clear(s.values) // no value keeps a dropped buffer alive
	scratchPool.Put(s)
}

// grow returns b resliced to n bytes, reallocated only when it is too
// small; the contents are not kept.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}
