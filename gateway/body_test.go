package gateway

import (
	"flag"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/proto/wire"
)

// FuzzDecode feeds arbitrary decompressed bodies to both decoders: neither
// may panic, and whatever they accept must become records the consumer
// accepts too, a 1.0 body that wire.Decoder took as it is.
func FuzzDecode(f *testing.F) {
	req := v1Request(3)
	b, _ := req.Marshal()
	f.Add(b, false)
	v2, _ := snappy.Decode(nil, v2Body(f))
	f.Add(v2, true)
	f.Add([]byte{1 << 3, 5}, false)
	var cfg Config
	cfg.RegisterFlags(flag.NewFlagSet("", flag.PanicOnError))
	limits := cfg.Limits
	g := newGateway(cfg, &fakeProducer{}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	f.Fuzz(func(t *testing.T, raw []byte, isV2 bool) {
		v := V1
		if isV2 {
			v = V2
		}
		req, checked, held, rej := g.decode(raw, v, new(scratch))
		g.inflight.release(held)
		if rej != nil {
			return
		}
		// The gateway produces a checked body as it came, unchecked.
		if err := wire.ValidateWriteRequest(raw); checked && err != nil {
			t.Fatalf("a body the decoder took is a record the consumer refuses: %v", err)
		}
		// As the handler does: the pusher's checks drop what it would
		// refuse (a series without labels among it) before the split.
		_, _ = filterSeries(limits, req, time.Now())
		values, err := split(req, 1<<20)
		if err != nil {
			return
		}
		for _, b := range values {
			if err := wire.ValidateWriteRequest(b); err != nil {
				t.Fatalf("decoded request re-encodes into a record the consumer refuses: %v", err)
			}
			// ... nor one the pusher's decoder refuses, bounds included.
			d := wire.Decoder{Limits: limits.Wire()}
			if err := d.Decode(b, new(prompb.WriteRequest)); err != nil {
				t.Fatalf("decoded request re-encodes into a record the pusher refuses: %v", err)
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
