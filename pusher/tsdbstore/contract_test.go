package tsdbstore

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ferrylabs/ferry/proto/codec"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
	"github.com/ferrylabs/ferry/pusher/pushertest"
)

// spyBackend wraps the Store and breaks the Backend contract on purpose:
// it keeps the first label value of every request as the request gave it,
// without a copy, next to a copy. Comparing the two inside later Pushes
// (where the race detector sees the stream's ordering) shows whether the
// stream reused the memory, which is what makes the test below mean
// anything.
type spyBackend struct {
	*Store
	mu       sync.Mutex
	kept     []string // shares the request's memory
	copies   []string
	overlaid int // kept strings found changed
}

func (b *spyBackend) Push(ctx context.Context, tenant string, req *prompb.WriteRequest) (backend.Result, error) {
	b.mu.Lock()
	for i, s := range b.kept {
		if s != "" && s != b.copies[i] {
			b.overlaid++
			b.kept[i] = "" // seen once; and it may change again
		}
	}
	if len(req.Timeseries) > 0 && len(req.Timeseries[0].Labels) > 1 {
		v := req.Timeseries[0].Labels[1].Value
		b.kept = append(b.kept, v)
		b.copies = append(b.copies, strings.Clone(v))
	}
	b.mu.Unlock()
	return b.Store.Push(ctx, tenant, req)
}

// contractRequest is request k: series whose label values, exemplar trace
// IDs and metadata all name k, with the same lengths for every k, so that
// a later request's bytes land exactly where an earlier one's were.
func contractRequest(k, series int) *ferryv1.PushRequest {
	wr := prompb.WriteRequest{}
	for i := range series {
		wr.Timeseries = append(wr.Timeseries, prompb.TimeSeries{
			Labels: []prompb.Label{
				{Name: "__name__", Value: "contract"},
				{Name: "series", Value: fmt.Sprintf("r%03d-s%03d", k, i)},
			},
			Samples:   []prompb.Sample{{Value: float64(k*1000 + i), Timestamp: base}},
			Exemplars: []prompb.Exemplar{{Labels: lbls("trace_id", fmt.Sprintf("trace-r%03d-s%03d", k, i)), Value: 1, Timestamp: base}},
		})
	}
	wr.Metadata = []prompb.MetricMetadata{{
		Type: prompb.MetricMetadata_METRIC_TYPE_GAUGE, MetricFamilyName: fmt.Sprintf("family_r%03d", k),
		Help: fmt.Sprintf("help of r%03d", k), Unit: fmt.Sprintf("u%03d", k),
	}}
	return &ferryv1.PushRequest{RequestId: uint64(k + 1), Tenant: "t1", WriteRequest: wr}
}

// TestStoreKeepsNothingOfAStreamRequest pushes requests on a real Push
// stream, so that later requests reuse the memory of earlier ones, and then
// checks that the TSDB, the exemplar storage and the metadata still hold
// the earlier requests' strings: the Store copies what it keeps.
func TestStoreKeepsNothingOfAStreamRequest(t *testing.T) {
	const requests, series = 12, 20
	backend := &spyBackend{Store: newTestStore(t, nil)}
	addr := pushertest.Serve(t, "127.0.0.1:0", backend, slog.New(slog.DiscardHandler))
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), codec.DialOption())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	stream, err := ferryv1.NewPusherServiceClient(conn).Push(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range requests {
		// Stop and wait, like one tenant's lane: every request is
		// decoded after the previous one was answered and released.
		if err := stream.Send(contractRequest(k, series)); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
			t.Fatalf("request %d: %s: %s", k, resp.Status, resp.Reason)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}

	backend.mu.Lock()
	overlaid := backend.overlaid
	backend.mu.Unlock()
	if overlaid == 0 {
		t.Fatal("no request's memory was reused by a later one: the test proves nothing")
	}

	got := queryAll(t, backend.Store, "t1")
	for k := range requests {
		for i := range series {
			name := fmt.Sprintf(`{__name__="contract", series="r%03d-s%03d"}`, k, i)
			if v := floatsOf(got[name]); !slices.Equal(v, []float64{float64(base), float64(k*1000 + i)}) {
				t.Errorf("series %s holds %v; stored series: %d", name, v, len(got))
			}
		}
	}
	checkContractExemplars(t, backend.Store, requests, series)
	md := backend.Metadata("t1")
	for k := range requests {
		m, ok := md[fmt.Sprintf("family_r%03d", k)]
		if !ok || m.Help != fmt.Sprintf("help of r%03d", k) || m.Unit != fmt.Sprintf("u%03d", k) {
			t.Errorf("metadata of request %d: %+v, %t", k, m, ok)
		}
	}
}

func checkContractExemplars(t *testing.T, s *Store, requests, series int) {
	t.Helper()
	eq, err := s.ExemplarQueryable("t1").ExemplarQuerier(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	res, err := eq.Select(math.MinInt64, math.MaxInt64, []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "contract")})
	if err != nil {
		t.Fatal(err)
	}
	traces := map[string]string{}
	for _, r := range res {
		for _, e := range r.Exemplars {
			traces[r.SeriesLabels.Get("series")] = e.Labels.Get("trace_id")
		}
	}
	for k := range requests {
		for i := range series {
			id := fmt.Sprintf("r%03d-s%03d", k, i)
			if got, want := traces[id], "trace-"+id; got != want {
				t.Errorf("exemplar of series %s has trace_id %q, want %q", id, got, want)
			}
		}
	}
}
