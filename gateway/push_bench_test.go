package gateway

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/client_golang/prometheus"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"

	"github.com/ferrylabs/ferry/internal/benchfixture"
)

// discardProducer acknowledges every record at once, so the benchmarks
// measure the gateway's own work per request.
type discardProducer struct{}

func (discardProducer) produce(context.Context, string, [][]byte) error { return nil }
func (discardProducer) ready(context.Context) error                     { return nil }
func (discardProducer) close()                                          {}

// discardWriter is a ResponseWriter that keeps only the status, reusing
// its header map, so the benchmark does not measure a recorder.
type discardWriter struct {
	header http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(status int)      { w.status = status }

// benchV1 is a snappy-compressed remote-write 1.0 request of n series of
// one sample each.
func benchV1(b *testing.B, n int) []byte {
	b.Helper()
	ts := time.Now().Add(-time.Minute).UnixMilli()
	raw, err := benchfixture.NodeRequest(n, ts).Marshal()
	if err != nil {
		b.Fatal(err)
	}
	return snappy.Encode(nil, raw)
}

// benchV2 is the same request in remote write 2.0, its strings interned
// in the symbols table as Prometheus 3 writes it.
func benchV2(b *testing.B, n int) []byte {
	b.Helper()
	ts := time.Now().Add(-time.Minute).UnixMilli()
	req := &writev2.Request{Symbols: []string{""}}
	refs := map[string]uint32{"": 0}
	ref := func(s string) uint32 {
		r, ok := refs[s]
		if !ok {
			r = uint32(len(req.Symbols))
			refs[s] = r
			req.Symbols = append(req.Symbols, s)
		}
		return r
	}
	for i := range n {
		var lr []uint32
		for _, l := range benchfixture.NodeLabels(i, false) {
			lr = append(lr, ref(l.Name), ref(l.Value))
		}
		req.Timeseries = append(req.Timeseries, writev2.TimeSeries{
			LabelsRefs: lr,
			Samples:    []writev2.Sample{{Value: float64(i), Timestamp: ts}},
			Metadata:   writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_COUNTER, HelpRef: ref("Seconds the CPUs spent in each mode.")},
		})
	}
	raw, err := req.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	return snappy.Encode(nil, raw)
}

// BenchmarkServeHTTP is the whole handler path of one remote-write
// request, from the compressed body to the records handed to a producer
// that acknowledges at once: read, decompress, decode, limits, checks,
// record values. split=N forces records of at most N bytes.
func BenchmarkServeHTTP(b *testing.B) {
	for _, bc := range []struct {
		name      string
		ct        string
		body      func(*testing.B, int) []byte
		series    int
		maxRecord int
	}{
		{name: "v1/series=500", ct: ctV1, body: benchV1, series: 500},
		{name: "v1/series=2000", ct: ctV1, body: benchV1, series: 2000},
		{name: "v1/series=2000/split=65536", ct: ctV1, body: benchV1, series: 2000, maxRecord: 65536},
		{name: "v2/series=500", ct: ctV2, body: benchV2, series: 500},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var cfg Config
			cfg.RegisterFlags(flag.NewFlagSet("", flag.PanicOnError))
			if bc.maxRecord > 0 {
				cfg.MaxRecordBytes = bc.maxRecord
			}
			if err := cfg.Validate(); err != nil {
				b.Fatal(err)
			}
			g := newGateway(cfg, discardProducer{}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
			body := bc.body(b, bc.series)
			header := http.Header{"Content-Type": {bc.ct}, "Content-Encoding": {"snappy"}, "X-Scope-Orgid": {"tenant-1"}}
			u := &url.URL{Path: "/api/v1/push"}
			w := &discardWriter{header: http.Header{}}
			rd := bytes.NewReader(body)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			cpu := benchfixture.CPUTime(b)
			for b.Loop() {
				rd.Reset(body)
				r := (&http.Request{Method: http.MethodPost, URL: u, Header: header, Body: io.NopCloser(rd), ContentLength: int64(len(body))}).WithContext(context.Background())
				clear(w.header)
				w.status = 0
				g.ServeHTTP(w, r)
				if w.status != http.StatusNoContent {
					b.Fatalf("status %d", w.status)
				}
			}
			benchfixture.ReportCPU(b, cpu)
			b.ReportMetric(float64(bc.series)*float64(b.N)/b.Elapsed().Seconds(), "series/s")
		})
	}
}
