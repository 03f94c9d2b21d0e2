package app

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/statuspage"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/tsdbstore"
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
		"<title>ferry-pusher</title>", "<dd>tsdb</dd>", "<dd>utf8 (-limits.name-validation-scheme)</dd>", "<th>samples/s</th>",
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

func TestTenantSectionShowsOnlyTheLargestTenantsBeyondItsLimit(t *testing.T) {
	t.Parallel()
	now := time.Now()
	tenants := []tsdbstore.TenantStatus{
		{Tenant: "a", Open: true, HeadSeries: 5}, {Tenant: "b", Open: true, HeadSeries: 50},
		{Tenant: "c"}, {Tenant: "d", Open: true, HeadSeries: 20},
	}
	sec := tenantSection(tenants, 2, now)
	var got []string
	for _, r := range sec.Rows {
		got = append(got, r.Cells[0])
	}
	if strings.Join(got, ",") != "b,d" || !strings.Contains(sec.Note, "the 2 of 4 tenants with the most series") {
		t.Errorf("rows %v, note %q; want b,d and a note saying so", got, sec.Note)
	}
}

func TestTenantSectionSaysWhereASharedTenantIsStored(t *testing.T) {
	t.Parallel()
	now := time.Now()
	sec := tenantSection([]tsdbstore.TenantStatus{
		{Tenant: "a", Open: true, HeadSeries: 5, StorageBytes: 2048},
		{Tenant: "b", Open: true, HeadSeries: 5, StorageBytes: -1, SamplesPerSecond: -1},
	}, 10, now)
	if got := sec.Rows[0].Cells[5]; got != statuspage.Bytes(2048) {
		t.Errorf("a TSDB of its own: storage %q, want %q", got, statuspage.Bytes(2048))
	}
	if got := sec.Rows[1].Cells[5]; got != "in the shared TSDB" {
		t.Errorf("the shared tenancy: storage %q", got)
	}
}
