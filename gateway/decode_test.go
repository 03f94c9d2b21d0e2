package gateway

import (
	"runtime"
	"testing"

	"github.com/klauspost/compress/snappy"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/proto/wire"
)

// FuzzDecode feeds arbitrary decompressed bodies to both decoders: neither
// may panic, and whatever they accept must become records the consumer
// accepts too.
func FuzzDecode(f *testing.F) {
	req := v1Request(3)
	b, _ := req.Marshal()
	f.Add(b, false)
	v2, _ := snappy.Decode(nil, v2Body(f))
	f.Add(v2, true)
	f.Add([]byte{1 << 3, 5}, false)
	f.Fuzz(func(t *testing.T, raw []byte, isV2 bool) {
		v := V1
		if isV2 {
			v = V2
		}
		req, rej := decode(raw, v, new(wire.Decoder), new(prompb.WriteRequest))
		if rej != nil {
			return
		}
		values, err := split(req, 1<<20)
		if err != nil {
			return
		}
		for _, b := range values {
			if err := validateRecord(b); err != nil {
				t.Fatalf("decoded request re-encodes into a record the consumer refuses: %v", err)
			}
		}
	})
}

// Not parallel: the memory statistics count every goroutine's allocations.
func TestDecompressRefusesABombBeforeAllocating(t *testing.T) {
	bomb := snappyBomb() // claims 1 GiB
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, rej := decompress(nil, bomb, 1<<30-1)
	runtime.ReadMemStats(&after)
	if rej == nil || rej.status != 413 {
		t.Fatalf("bomb: %v, want 413", rej)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("refusing a 1 GiB bomb allocated %d bytes", n)
	}
}
