package pusher

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrylabs/ferry/internal/benchfixture"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// nopRaw is a RawPusher that applies nothing.
type nopRaw struct{ stubBackend }

func (*nopRaw) PushRaw(_ context.Context, _ string, _ []byte, samples int64) (backend.Result, error) {
	return backend.Result{Accepted: samples}, nil
}

// BenchmarkRawPath is the pusher's own work on a received request for a
// backend that takes requests as encoded (the remote-write backend), from
// the envelope's bytes to PushRaw: by wire.Decoder.Scan (scan), or by
// decoding the request and filtering what was decoded (decode), which is
// what every request took before the scan.
func BenchmarkRawPath(b *testing.B) {
	for _, series := range []int{10, 2000} {
		for _, scan := range []bool{true, false} {
			b.Run(fmt.Sprintf("series=%d/scan=%v", series, scan), func(b *testing.B) {
				s := NewServer(benchConfig(b), &nopRaw{}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
				if !scan {
					s.scan = nil
				}
				req := &ferryv1.PushRequest{RequestId: 1, Tenant: "tenant-1", Topic: "ingest",
					WriteRequest: *benchfixture.NodeRequest(series, time.Now().UnixMilli())}
				raw, err := req.Marshal()
				if err != nil {
					b.Fatal(err)
				}
				dec := s.decoding()
				ctx := context.Background()
				var env envelope
				b.SetBytes(int64(len(raw)))
				b.ReportAllocs()
				start := benchfixture.CPUTime(b)
				for b.Loop() {
					if err := env.Unmarshal(raw); err != nil {
						b.Fatal(err)
					}
					r := env.decode(dec)
					res, err := s.applier.process(ctx, r.req, r.size, r.owner)
					if err != nil || res.Accepted != int64(series) {
						b.Fatalf("process = %+v, %v; want %d accepted", res, err, series)
					}
					r.recycle()
				}
				benchfixture.ReportCPU(b, start)
			})
		}
	}
}
