package integration

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

func TestARemoteWrite2RequestThroughTheGatewayIsQueryableInFerry(t *testing.T) {
	t.Parallel()
	p := startPipeline(t)
	g := startGateway(t, gatewayConfig(t, p, "127.0.0.1:0"))
	ctx := t.Context()
	ts := time.Now().Add(-time.Minute).UnixMilli()
	req := writev2.Request{
		Symbols: []string{"", "__name__", "rw2_metric", "job", "v2", "help", "bytes"},
		Timeseries: []writev2.TimeSeries{{
			LabelsRefs: []uint32{1, 2, 3, 4},
			Samples:    []writev2.Sample{{Value: 42.5, Timestamp: ts}},
			Metadata:   writev2.Metadata{Type: writev2.Metadata_METRIC_TYPE_GAUGE, HelpRef: 5, UnitRef: 6},
		}},
	}
	raw, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	hreq, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+g.HTTPAddr()+"/api/v1/write", bytes.NewReader(snappy.Encode(nil, raw)))
	hreq.Header.Set("Content-Type", "application/x-protobuf;proto=io.prometheus.write.v2.Request")
	hreq.Header.Set("Content-Encoding", "snappy")
	hreq.Header.Set("X-Prometheus-Remote-Write-Version", "2.0.0")
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("X-Prometheus-Remote-Write-Samples-Written") != "1" {
		t.Fatalf("status %d, samples written %q; want 204 and 1", resp.StatusCode, resp.Header.Get("X-Prometheus-Remote-Write-Samples-Written"))
	}
	waitFor(t, 30*time.Second, "the 2.0 sample to be queryable", func() bool {
		code, r := query(t, p.pusher.HTTPAddr(), gatewayTenant, `rw2_metric{job="v2"}`, ts)
		v, err := scalarOf(r)
		return code == http.StatusOK && err == nil && v == 42.5
	})
}
