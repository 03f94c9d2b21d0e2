package integration

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gatewayapp "github.com/ferrylabs/ferry/gateway/app"
	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/pusher/queryapi"
)

// gatewayTenant is the tenant the gateway gives Prometheus's requests:
// Debian's Prometheus 2.42 sends no custom headers, so the tests use
// -gateway.default-tenant.
const gatewayTenant = "prom"

// comparedSeries selects the series the tests compare between Prometheus's
// own TSDB and Ferry's: a few of the pusher's own metrics, scraped by
// Prometheus.
const comparedSeries = `{job="ferry", __name__=~"up|scrape_samples_scraped|go_goroutines|go_memstats_alloc_bytes_total|process_cpu_seconds_total"}`

// prometheusBinary returns Debian's prometheus, or skips (fails under
// CI=true) when it is not installed.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("prometheus is not installed (apt-get install prometheus): %v", err)
		}
		t.Skipf("skipping: the real-Prometheus test needs the prometheus binary (apt-get install prometheus): %v", err)
	}
	return path
}

// startPrometheus runs Prometheus scraping target every second and
// remote-writing to writeURL, until the test ends. It returns the address
// of its HTTP API.
func startPrometheus(t *testing.T, bin, target, writeURL string) string {
	t.Helper()
	return startPrometheusWith(t, bin, target, writeURL, "")
}

// startPrometheusWith is startPrometheus with extra lines for the
// remote_write entry, indented by four spaces.
func startPrometheusWith(t *testing.T, bin, target, writeURL, extra string) string {
	t.Helper()
	ports, err := kafkatest.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	dir := t.TempDir()
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: ferry
    static_configs:
      - targets: [%q]
remote_write:
  - url: %q
    queue_config:
      batch_send_deadline: 500ms
      min_backoff: 50ms
      max_backoff: 500ms
%s`, target, writeURL, extra)
	confPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+confPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	})
	return addr
}

// rawSamples runs the instant query q (a range selector) at atMs and
// returns each series' raw samples as "timestamp=value" strings, keyed by
// its labels. tenant "" sends no tenant header (Prometheus's own API).
func rawSamples(t *testing.T, addr, tenant, q string, atMs int64) (map[string][]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	form := url.Values{"query": {q}, "time": {strconv.FormatFloat(float64(atMs)/1000, 'f', 3, 64)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/v1/query?"+form.Encode(), nil)
	if err != nil {
		return nil, err
	}
	if tenant != "" {
		req.Header.Set(queryapi.TenantHeader, tenant)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", addr, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Values [][2]any          `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("HTTP %d %q: %w", resp.StatusCode, body, err)
	}
	if out.Status != "success" || out.Data.ResultType != "matrix" {
		return nil, fmt.Errorf("HTTP %d: status %q, type %q: %s", resp.StatusCode, out.Status, out.Data.ResultType, out.Error)
	}
	got := map[string][]string{}
	for _, s := range out.Data.Result {
		names := make([]string, 0, len(s.Metric))
		for k, v := range s.Metric {
			names = append(names, k+"="+strconv.Quote(v))
		}
		sort.Strings(names)
		key := "{" + strings.Join(names, ",") + "}"
		for _, v := range s.Values {
			got[key] = append(got[key], fmt.Sprintf("%v=%v", v[0], v[1]))
		}
	}
	return got, nil
}

// samplesCount is the number of samples across series.
func samplesCount(m map[string][]string) int {
	n := 0
	for _, v := range m {
		n += len(v)
	}
	return n
}

// diffSamples says how want and got differ, or "" when they are equal.
func diffSamples(want, got map[string][]string) string {
	var b strings.Builder
	for k, w := range want {
		g := got[k]
		if strings.Join(w, " ") != strings.Join(g, " ") {
			fmt.Fprintf(&b, "%s: Prometheus has %d samples, Ferry %d\n", k, len(w), len(g))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			fmt.Fprintf(&b, "%s: only in Ferry\n", k)
		}
	}
	return b.String()
}

// pipeline is Kafka, a pusher with a TSDB and one consumer per partition.
type pipeline struct {
	broker *kafkatest.Broker
	topic  string
	pusher *pusherProc
}

func startPipeline(t *testing.T) pipeline {
	t.Helper()
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, 2)
	pp := startPusher(t, pusherConfig(t, t.TempDir()))
	startConsumers(t, b, topic, topic+"-group", pp.GRPCAddr(), 2)
	return pipeline{broker: b, topic: topic, pusher: pp}
}

// gatewayConfig is the gateway/app configuration of the tests.
func gatewayConfig(t *testing.T, p pipeline, listen string) gatewayapp.Config {
	t.Helper()
	var cfg gatewayapp.Config
	cfg.RegisterFlags(flag.NewFlagSet("gateway", flag.PanicOnError))
	cfg.Gateway.KafkaAddress = strings.Join(p.broker.Addrs(), ",")
	cfg.Gateway.Topic = p.topic
	cfg.Gateway.DefaultTenant = gatewayTenant
	cfg.HTTPListenAddress = listen
	if err := cfg.Validate(); err != nil {
		t.Fatalf("gateway config: %v", err)
	}
	return cfg
}

// compareUntilEqual takes Prometheus's raw samples of comparedSeries over
// the two minutes before atMs and waits until Ferry's query API returns
// exactly the same.
func compareUntilEqual(t *testing.T, promAddr string, p pipeline, atMs int64, minSamples int) {
	t.Helper()
	q := comparedSeries + "[2m]"
	want, err := rawSamples(t, promAddr, "", q, atMs)
	if err != nil {
		t.Fatalf("prometheus: %v", err)
	}
	if n := samplesCount(want); n < minSamples || len(want) < 5 {
		t.Fatalf("prometheus holds %d samples in %d series, want at least %d in 5: did it scrape?", n, len(want), minSamples)
	}
	var diff string
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := rawSamples(t, p.pusher.HTTPAddr(), gatewayTenant, q, atMs)
		if err == nil {
			if diff = diffSamples(want, got); diff == "" {
				t.Logf("Ferry holds the same %d samples of %d series as Prometheus", samplesCount(want), len(want))
				return
			}
		} else {
			diff = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s Ferry's samples differ from Prometheus's:\n%s", diff)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitScraped waits until Prometheus holds at least n samples of up.
func waitScraped(t *testing.T, promAddr string, n int) {
	t.Helper()
	waitFor(t, 90*time.Second, fmt.Sprintf("prometheus to scrape %d times", n), func() bool {
		got, err := rawSamples(t, promAddr, "", `up{job="ferry"}[5m]`, time.Now().UnixMilli())
		return err == nil && samplesCount(got) >= n
	})
}

func TestARealPrometheusWritesThroughTheGatewayAndFerryStoresTheSameSamples(t *testing.T) {
	t.Parallel()
	bin := prometheusBinary(t)
	p := startPipeline(t)
	g := startGateway(t, gatewayConfig(t, p, "127.0.0.1:0"))
	promAddr := startPrometheus(t, bin, p.pusher.HTTPAddr(), "http://"+g.HTTPAddr()+"/api/v1/write")
	waitScraped(t, promAddr, 8)
	compareUntilEqual(t, promAddr, p, time.Now().Add(-time.Second).UnixMilli(), 30)
}

// gatewayProcess is bin/ferry-gateway run as a child process.
type gatewayProcess struct {
	cmd *exec.Cmd
	log *os.File
}

func buildGateway(t *testing.T) string {
	t.Helper()
	root, err := kafkatest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "ferry-gateway")
	build := exec.Command("go", "build", "-o", bin, "./services/ferry-gateway")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ferry-gateway: %v\n%s", err, out)
	}
	return bin
}

func runGateway(t *testing.T, bin string, cfg gatewayapp.Config, logPath string) *gatewayProcess {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-kafka.address="+cfg.Gateway.KafkaAddress, "-kafka.topic="+cfg.Gateway.Topic,
		"-gateway.default-tenant="+gatewayTenant, "-http.listen-address="+cfg.HTTPListenAddress)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start gateway: %v", err)
	}
	gp := &gatewayProcess{cmd: cmd, log: logf}
	waitFor(t, 30*time.Second, "the gateway to be ready", func() bool {
		resp, err := http.Get("http://" + cfg.HTTPListenAddress + "/ready")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return gp
}

func (gp *gatewayProcess) kill(t *testing.T) {
	t.Helper()
	_ = gp.cmd.Process.Signal(syscall.SIGKILL)
	_ = gp.cmd.Wait()
	_ = gp.log.Close()
}

func TestPrometheusDeliversEverythingThroughAGatewayKilledWhileItWrites(t *testing.T) {
	t.Parallel()
	bin := prometheusBinary(t)
	gwBin := buildGateway(t)
	p := startPipeline(t)
	ports, err := kafkatest.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := gatewayConfig(t, p, "127.0.0.1:"+strconv.Itoa(ports[0]))
	logPath := filepath.Join(t.TempDir(), "gateway.log")
	gw := runGateway(t, gwBin, cfg, logPath)
	t.Cleanup(func() {
		gw.kill(t)
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("gateway log:\n%s", b)
		}
	})
	promAddr := startPrometheus(t, bin, p.pusher.HTTPAddr(), "http://"+cfg.HTTPListenAddress+"/api/v1/push")
	waitScraped(t, promAddr, 5)
	gw.kill(t)
	// Prometheus keeps scraping and retrying while the gateway is gone.
	time.Sleep(3 * time.Second)
	gw = runGateway(t, gwBin, cfg, logPath)
	waitScraped(t, promAddr, 12)
	compareUntilEqual(t, promAddr, p, time.Now().Add(-time.Second).UnixMilli(), 50)
	// The kill must have hit Prometheus's writes, or the test proved nothing.
	if n := promCounter(t, promAddr, "prometheus_remote_storage_samples_retried_total"); n == 0 {
		t.Error("Prometheus retried no samples: the gateway was not killed while it wrote")
	} else {
		t.Logf("Prometheus retried %v samples across the kill", n)
	}
}

// promCounter sums the samples of a counter on Prometheus's own /metrics.
func promCounter(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		// A name with labels in it matches as a prefix; a bare name must
		// not match a longer name.
		if !strings.HasPrefix(line, name) || (!strings.Contains(name, "{") && len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// TestAPrometheus3WritesRemoteWrite2ThroughTheGateway needs a Prometheus
// 3.x binary, which Debian does not package: `make test-rw2` builds one
// from the Go module proxy and runs this test with it in FERRY_PROMETHEUS3. The remote-write 2.0 conversion has
// unit tests of its own; this test is the real client's word on it.
func TestAPrometheus3WritesRemoteWrite2ThroughTheGateway(t *testing.T) {
	t.Parallel()
	bin := os.Getenv("FERRY_PROMETHEUS3")
	if bin == "" {
		t.Skip("skipping: set FERRY_PROMETHEUS3 to a Prometheus 3.x binary to test remote write 2.0 with a real client")
	}
	p := startPipeline(t)
	g := startGateway(t, gatewayConfig(t, p, "127.0.0.1:0"))
	promAddr := startPrometheusWith(t, bin, p.pusher.HTTPAddr(), "http://"+g.HTTPAddr()+"/api/v1/write",
		"    protobuf_message: io.prometheus.write.v2.Request\n")
	waitScraped(t, promAddr, 8)
	compareUntilEqual(t, promAddr, p, time.Now().Add(-time.Second).UnixMilli(), 30)
	if n := testutilRequests(t, g.HTTPAddr()); n == 0 {
		t.Error("the gateway answered no request: did Prometheus send remote write 2.0 at all?")
	}
}

// testutilRequests is the gateway's count of 204 answers, read from its
// /metrics.
func testutilRequests(t *testing.T, addr string) float64 {
	t.Helper()
	return promCounter(t, addr, `ferry_gateway_requests_total{status="204"`)
}

// startGateway starts a gateway through gateway/app.Start and runs it until
// the test ends, failing the test unless it stops cleanly.
func startGateway(t testing.TB, cfg gatewayapp.Config) *gatewayapp.Process {
	t.Helper()
	g, err := gatewayapp.Start(cfg, testLogger(t, "gateway"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway run: %v", err)
		}
	})
	return g
}
