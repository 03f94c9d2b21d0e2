package consumer

import (
	"fmt"
	"testing"

	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/proto/prompb"
)

func decodeConsumer() *Consumer {
	return &Consumer{cfg: Config{Topic: "ingest", MaxRequestBytes: 1 << 20}}
}

// FuzzDecodeRecord feeds arbitrary record values to the decoder: it must
// never panic, and must either produce a request or say why it skipped.
func FuzzDecodeRecord(f *testing.F) {
	f.Add("tenant-1", loadgen.Shape{Series: 2, StepMs: 1}.Marshal("tenant-1", 1))
	f.Add("", []byte{})
	f.Add("t", []byte{0x0a, 0x02, 0x0a, 0x00})
	f.Add("t", []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		c := decodeConsumer()
		it := &item{tenant: key, value: value, partition: 1, offset: 2}
		c.decodeItem(it)
		// Valid data must never be skipped: whatever the generated decoder
		// (the pusher's) accepts, the consumer accepts too, unless the
		// pusher refuses it as well (an invalid tenant ID, or a value
		// refused by wire's policy).
		var wr prompb.WriteRequest
		if it.skip != nil && it.skip.cause != "invalid_tenant" && it.skip.cause != "refused" && key != "" && wr.Unmarshal(value) == nil {
			t.Fatalf("skipped a value the pusher decodes: %s", it.skip.reason)
		}
		if it.skip == nil && key == "" {
			t.Fatal("accepted a record without a tenant")
		}
	})
}

// BenchmarkDecode measures decoding one record: series=100 is the
// benchmark once named BenchmarkDecode alone; series=10 is the shape of the
// end-to-end benchmark's default load, many small records.
func BenchmarkDecode(b *testing.B) {
	for _, series := range []int{100, 10} {
		b.Run(fmt.Sprintf("series=%d", series), func(b *testing.B) {
			benchmarkDecode(b, series)
		})
	}
}

func benchmarkDecode(b *testing.B, series int) {
	value := loadgen.Shape{Series: series, StartMs: 1_700_000_000_000, StepMs: 1000}.Marshal("tenant-1", 1)
	c := decodeConsumer()
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	for b.Loop() {
		it := &item{tenant: "tenant-1", value: value}
		c.decodeItem(it)
		if it.skip != nil {
			b.Fatal(it.skip)
		}
	}
}
