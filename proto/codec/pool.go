package codec

import (
	"math/bits"
	"sync"
)

// Marshal's buffers come in powers of two from 2^minTier to 2^maxTier
// bytes; a larger message gets a buffer of its own.
const (
	// 2 KiB: gRPC pools a buffer only when its capacity is above 1 KiB
	// (mem.NewBuffer); below that it boxes the bytes in an interface.
	minTier = 11
	maxTier = 24 // 16 MiB, the largest message a consumer or pusher accepts
)

// dirtyPool is the mem.BufferPool of Marshal's buffers. Unlike gRPC's
// default pool it does not clear a buffer it hands out: Marshal writes
// every byte of the length it asks for (it checks the count), and nothing
// reads beyond that length. The clearing was the consumer's largest single
// cost at 10-series records (7% of its CPU): gRPC's tiers jump from 32 KiB
// to 1 MiB, so a 40 KB PushBatch message cleared a whole MiB. Every power
// of two has its tier here, so a buffer is at most twice its message.
type dirtyPool struct {
	tiers [maxTier - minTier + 1]sync.Pool
}

// marshalPool serves every Codec.
var marshalPool = new(dirtyPool)

// Get returns a buffer of length size whose contents are unspecified.
func (p *dirtyPool) Get(size int) *[]byte {
	i, ok := tierOf(size)
	if !ok {
		b := make([]byte, size)
		return &b
	}
	if bp, _ := p.tiers[i].Get().(*[]byte); bp != nil {
		*bp = (*bp)[:size]
		return bp
	}
	b := make([]byte, size, 1<<(i+minTier))
	return &b
}

// Put takes back a buffer Get handed out. One whose capacity is not a
// tier's (a larger message's) is left to the garbage collector.
func (p *dirtyPool) Put(bp *[]byte) {
	c := cap(*bp)
	i, ok := tierOf(c)
	if !ok || c != 1<<(i+minTier) {
		return
	}
	p.tiers[i].Put(bp)
}

// tierOf returns the index of the smallest tier that holds size bytes, and
// false when size is larger than the largest tier.
func tierOf(size int) (int, bool) {
	if size > 1<<maxTier {
		return 0, false
	}
	shift := bits.Len(uint(max(size, 1) - 1))
	return max(shift, minTier) - minTier, true
}
