package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestOneTenantOnTwoTSDBPushersReadsWholeThroughPrometheusRemoteRead runs
// two ferry-pusher processes with the TSDB backend and one tenant whose
// records are on all four partitions of a topic: consumers 0 and 1 push to
// pusher A, consumers 2 and 3 to pusher B, so the tenant's data lives half
// in each TSDB. Each partition carries its own series, as the gateway's
// tenant shards keep a series on one partition. A real Prometheus (Debian's
// 2.42) with remote_read to both pushers must then answer count_over_time
// and sum_over_time of every series exactly as written: the way docs/
// querying.md tells an operator to query a tenant spread over pushers.
func TestOneTenantOnTwoTSDBPushersReadsWholeThroughPrometheusRemoteRead(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("prometheus is required under CI=true (Debian package prometheus): %v", err)
		}
		t.Skipf("prometheus not installed (Debian package prometheus): %v", err)
	}
	const partitions, series, tenant = 4, 2, "big"
	steps := 2000
	if currentScale().name == "large" {
		steps = 10_000
	}
	// One tenant, so newPipeline's tenant-to-partition rule is unused: the
	// records below name their partitions themselves.
	pl := newPipeline(t, partitions, 1, series)
	// Prometheus 2.42 sends no X-Scope-OrgID (docs/querying.md), so the
	// pushers answer its reads as the tenant by default.
	pushers := []*proc{
		startNamedPusherProc(t, "pusher-a", "-pusher.backend=tsdb", "-storage.path="+filepath.Join(t.TempDir(), "tsdb"), "-query.default-tenant="+tenant),
		startNamedPusherProc(t, "pusher-b", "-pusher.backend=tsdb", "-storage.path="+filepath.Join(t.TempDir(), "tsdb"), "-query.default-tenant="+tenant),
	}
	owner := func(partition int) *proc { return pushers[partition*len(pushers)/partitions] }
	bin, _ := binaries(t)
	var cs []*proc
	for p := range partitions {
		c := newProc(t, fmt.Sprintf("consumer-%d", p), bin, freeAddr(t), pl.consumerArgs(p, owner(p).grpcAddr)...)
		c.start()
		cs = append(cs, c)
	}
	for _, c := range cs {
		c.waitReady(60 * time.Second)
	}

	// Partition p carries the series of instance demo-p<p>, key = tenant.
	cl := pl.broker.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond))
	start := time.Now()
	const batchSteps = 250
	for lo := 0; lo < steps; lo += batchSteps {
		var recs []*kgo.Record
		for step := lo; step < min(steps, lo+batchSteps); step++ {
			for p := range partitions {
				recs = append(recs, &kgo.Record{
					Topic: pl.topic, Partition: int32(p), Key: []byte(tenant),
					Value: pl.shape.Marshal(partitionInstance(p), step),
				})
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := cl.ProduceSync(ctx, recs...).FirstErr()
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	committed := pl.waitCommittedToEnd(3 * time.Minute)
	t.Logf("%d records on %d partitions committed %s after %s", steps*partitions, partitions, formatOffsets(committed),
		time.Since(start).Round(time.Millisecond))

	at := time.UnixMilli(pl.shape.StartMs + int64(steps)*pl.shape.StepMs)
	rng := fmt.Sprintf("[%dms]", int64(steps)*pl.shape.StepMs+60_000)
	want := map[string][2]float64{} // instance/series: count, sum
	for p := range partitions {
		for s := range series {
			sum := float64(s)*1000*float64(steps) + float64(steps)*float64(steps-1)/2
			want[partitionInstance(p)+"/"+strconv.Itoa(s)] = [2]float64{float64(steps), sum}
		}
	}

	// Where the data lives: each pusher holds exactly the series of the
	// partitions its consumers read, none of the others.
	for i, pu := range pushers {
		got := querySeries(t, pu.httpAddr, tenant, "count_over_time(ferry_demo_value"+rng+")", at)
		var wantKeys []string
		for p := range partitions {
			if owner(p) == pu {
				for s := range series {
					wantKeys = append(wantKeys, "demo-"+partitionInstance(p)+"/"+strconv.Itoa(s))
				}
			}
		}
		if keys := sortedKeys(got); !slices.Equal(keys, wantKeys) {
			t.Errorf("pusher %d holds series %v, want %v", i, keys, wantKeys)
		}
	}

	prom := startRemoteReadingPrometheus(t, promBin, pushers[0].httpAddr, pushers[1].httpAddr)
	counts := querySeries(t, prom, "", "count_over_time(ferry_demo_value"+rng+")", at)
	sums := querySeries(t, prom, "", "sum_over_time(ferry_demo_value"+rng+")", at)
	var samples float64
	for key, w := range want {
		key = "demo-" + key
		samples += counts[key]
		if counts[key] != w[0] || math.Abs(sums[key]-w[1]) > 0.5 {
			t.Errorf("series %s through Prometheus: count %.0f sum %.0f, want count %.0f sum %.0f", key, counts[key], sums[key], w[0], w[1])
		}
	}
	if len(counts) != len(want) || len(sums) != len(want) {
		t.Errorf("Prometheus returned %d counted and %d summed series, want %d: %v", len(counts), len(sums), len(want), sortedKeys(counts))
	}
	t.Logf("Prometheus reading %d pushers: %d series, %.0f samples (want %d)", len(pushers), len(counts), samples, steps*series*partitions)
	produced := int64(steps * partitions)
	delivered := min(produced, int64(samples)/series)
	report(t, outcome{
		name: "tsdb-pushers/remote-read", produced: produced, delivered: delivered, lost: produced - delivered,
		extra: fmt.Sprintf("pushers=%d series=%d samples_read=%.0f", len(pushers), len(counts), samples),
	})
}

// partitionInstance names the series of partition p in the tests of
// several pushers: loadgen's instance label becomes demo-p<p>.
func partitionInstance(p int) string { return "p" + strconv.Itoa(p) }

// startNamedPusherProc starts ferry-pusher as name with args and waits
// until it is ready.
func startNamedPusherProc(t testing.TB, name string, args ...string) *proc {
	t.Helper()
	_, bin := binaries(t)
	grpcAddr := freeAddr(t)
	p := newProc(t, name, bin, freeAddr(t), append([]string{"-grpc.listen-address=" + grpcAddr, "-shutdown-timeout=5s"}, args...)...)
	p.grpcAddr = grpcAddr
	p.start()
	p.waitReady(60 * time.Second)
	return p
}

// startRemoteReadingPrometheus runs Prometheus with remote_read (recent
// data included) to every pusher's /api/v1/read and no scrape targets, and
// returns its address once it is ready.
func startRemoteReadingPrometheus(t *testing.T, bin string, pusherHTTP ...string) string {
	t.Helper()
	dir := t.TempDir()
	var config strings.Builder
	config.WriteString("remote_read:\n")
	for _, addr := range pusherHTTP {
		fmt.Fprintf(&config, "  - url: http://%s/api/v1/read\n    read_recent: true\n", addr)
	}
	configPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configPath, []byte(config.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var logs bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "--config.file="+configPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting prometheus: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus config:\n%s\nprometheus output:\n%s", config.String(), logs.String())
		}
	})
	waitFor(t, 60*time.Second, "prometheus ready", func() bool {
		code, _, err := httpGet(addr, "/-/ready", nil)
		return err == nil && code == http.StatusOK
	})
	return addr
}

// querySeries runs an instant query (as tenant unless it is empty) and
// returns its vector result keyed by instance/series. A warning, such as
// a remote read that failed, fails the test: the answer would be partial.
func querySeries(t testing.TB, addr, tenant, query string, at time.Time) map[string]float64 {
	t.Helper()
	q := url.Values{"query": {query}, "time": {strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64)}}
	var header http.Header
	if tenant != "" {
		header = http.Header{"X-Scope-Orgid": {tenant}}
	}
	code, body, err := httpGet(addr, "/api/v1/query?"+q.Encode(), header)
	if err != nil || code != http.StatusOK {
		t.Fatalf("query %q at %s: HTTP %d %s: %v", query, addr, code, body, err)
	}
	var r struct {
		Status   string   `json:"status"`
		Warnings []string `json:"warnings"`
		Data     struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("query %q: decoding %s: %v", query, body, err)
	}
	if r.Status != "success" || r.Data.ResultType != "vector" || len(r.Warnings) > 0 {
		t.Fatalf("query %q at %s: %s", query, addr, body)
	}
	out := map[string]float64{}
	for _, s := range r.Data.Result {
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			t.Fatalf("query %q: value %q: %v", query, str, err)
		}
		out[s.Metric["instance"]+"/"+s.Metric["series"]] = v
	}
	return out
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
