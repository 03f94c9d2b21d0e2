package remotewrite

// Ferry links one snappy library, klauspost/compress (its snappy package,
// and s2's snappy-compatible fast encoder where encoding is hot), chosen by
// these benchmarks on a remote-write body of 2,000 series (about 0.5 MB),
// -cpu 1, medians of 6 runs here: decoding takes 68 µs with either
// golang/snappy or klauspost's snappy.Decode (88 µs with DecodeStrict), and
// encoding 101 µs with s2.EncodeSnappy against 163-174 µs with
// golang/snappy's Encode. golang/snappy is left only to Prometheus'
// packages and to this comparison.

import (
	"testing"

	gsnappy "github.com/golang/snappy"
	"github.com/klauspost/compress/s2"
	ksnappy "github.com/klauspost/compress/snappy"

	"github.com/ferrylabs/ferry/internal/benchfixture"
)

// snappyBody is a remote-write body of 2,000 node-exporter series as
// Prometheus sends it (compressed with golang/snappy's Encode).
func snappyBody(b *testing.B) (raw, compressed []byte) {
	b.Helper()
	raw, err := benchfixture.NodeRequest(2000, 1_700_000_000_000).Marshal()
	if err != nil {
		b.Fatal(err)
	}
	return raw, gsnappy.Encode(nil, raw)
}

// BenchmarkSnappyDecode decodes a remote-write body, the hot path of the
// gateway's and the wire decoder's reading of every request, with each
// snappy implementation Ferry has linked, into a reused buffer.
func BenchmarkSnappyDecode(b *testing.B) {
	raw, compressed := snappyBody(b)
	for _, impl := range []struct {
		name   string
		decode func(dst, src []byte) ([]byte, error)
	}{
		{"golang-snappy", gsnappy.Decode},
		{"klauspost-snappy", ksnappy.Decode},
		{"klauspost-snappy-strict", ksnappy.DecodeStrict},
	} {
		b.Run(impl.name, func(b *testing.B) {
			dst := make([]byte, len(raw))
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := impl.decode(dst, compressed); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSnappyEncode compresses the same body: what the remote-write
// backend does for every request it forwards, and remote read for every
// answer.
func BenchmarkSnappyEncode(b *testing.B) {
	raw, _ := snappyBody(b)
	for _, impl := range []struct {
		name   string
		encode func(dst, src []byte) []byte
	}{
		{"golang-snappy", gsnappy.Encode},
		{"klauspost-snappy", ksnappy.Encode},
		{"klauspost-s2-snappy", s2.EncodeSnappy},
	} {
		b.Run(impl.name, func(b *testing.B) {
			dst := make([]byte, gsnappy.MaxEncodedLen(len(raw)))
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			var n int
			for b.Loop() {
				n = len(impl.encode(dst, raw))
			}
			b.ReportMetric(float64(len(raw))/float64(n), "ratio")
		})
	}
}
