package app

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// TestStatusPageListsTheTenants writes two tenants through gRPC and reads
// the page at / of the HTTP port: each tenant with its state, series and
// storage, and the samples rate once the page was looked at twice.
func TestStatusPageListsTheTenants(t *testing.T) {
	t.Parallel()
	p := startPusher(t, nil)
	client := ferryv1.NewPusherServiceClient(dial(t, p.GRPCAddr()))
	ctx := t.Context()
	now := time.Now().UnixMilli()
	for _, tenant := range []string{"tenant-a", "tenant-b"} {
		req := &ferryv1.PushRequest{Tenant: tenant, WriteRequest: prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
			series(now, 1, "__name__", "up", "job", "a"), series(now, 1, "__name__", "up", "job", "b"),
		}}}
		if resp, err := client.PushOne(ctx, req); err != nil || resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
			t.Fatalf("push %s: %v %v", tenant, resp, err)
		}
	}
	body := getPage(t, "http://"+p.HTTPAddr()+"/")
	for _, want := range []string{
		"<title>ferry-pusher</title>", "<dd>tsdb</dd>", "<th>samples/s</th>",
		"<tr><td>tenant-a</td><td>open</td><td>2</td><td>–</td>", "<tr><td>tenant-b</td><td>open</td><td>2</td>", "ago</td><td>",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("status page lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "<td>0 B</td>") {
		t.Errorf("a tenant with data shows no storage:\n%s", body)
	}
}

func getPage(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	return string(body)
}
