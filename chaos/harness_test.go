package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/poll"
)

// ---------------------------------------------------------------------------
// Binaries: built once per test run, without -race, into a temporary
// directory named after this process so that a later run can remove what a
// killed run left behind.

const binDirPrefix = "ferry-chaos-bin-"

var bins struct {
	once     sync.Once
	dir      string
	consumer string
	pusher   string
	gateway  string
	err      error
}

// binaries returns the paths of ferry-consumer and ferry-pusher, building
// them on the first call.
func binaries(t testing.TB) (consumerBin, pusherBin string) {
	t.Helper()
	bins.once.Do(func() {
		removeStaleBinDirs()
		root, err := kafkatest.ModuleRoot()
		if err != nil {
			bins.err = err
			return
		}
		dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", binDirPrefix, os.Getpid()))
		if err != nil {
			bins.err = err
			return
		}
		start := time.Now()
		cmd := exec.Command(goTool(), "build", "-o", dir+string(os.PathSeparator),
			"./services/ferry-consumer", "./services/ferry-pusher", "./services/ferry-gateway")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			_ = os.RemoveAll(dir)
			bins.err = fmt.Errorf("go build of the services failed: %w\n%s", err, out)
			return
		}
		bins.dir = dir
		bins.consumer = filepath.Join(dir, "ferry-consumer")
		bins.pusher = filepath.Join(dir, "ferry-pusher")
		bins.gateway = filepath.Join(dir, "ferry-gateway")
		fmt.Fprintf(os.Stderr, "chaos: built ferry-consumer, ferry-pusher and ferry-gateway in %s (%.1fs)\n", dir, time.Since(start).Seconds())
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return bins.consumer, bins.pusher
}

// gatewayBinary returns the path of ferry-gateway, built with the others.
func gatewayBinary(t testing.TB) string {
	t.Helper()
	binaries(t)
	return bins.gateway
}

// keepLog copies a log into $FERRY_CHAOS_LOGS/<test>/ when that is set, so
// the logs of a passing run can be read too.
func keepLog(t testing.TB, path, name string) {
	dir := os.Getenv("FERRY_CHAOS_LOGS")
	if dir == "" {
		return
	}
	dst := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_"))
	b, err := os.ReadFile(path)
	if err == nil {
		err = os.MkdirAll(dst, 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dst, name+".log"), b, 0o644)
	}
	if err != nil {
		t.Logf("keeping the log of %s: %v", name, err)
	}
}

// removeBinaries deletes this run's binaries.
func removeBinaries() {
	if bins.dir != "" {
		_ = os.RemoveAll(bins.dir)
	}
}

// removeStaleBinDirs removes binary directories of earlier runs whose test
// process is gone (a run killed by -timeout never reaches its last test).
func removeStaleBinDirs() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), binDirPrefix+"*"))
	for _, m := range matches {
		rest := strings.TrimPrefix(filepath.Base(m), binDirPrefix)
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(m)
		}
	}
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}

// ---------------------------------------------------------------------------
// Ports.

var ports struct {
	mu   sync.Mutex
	used map[int]bool
}

// freePort returns a TCP port free on 127.0.0.1, below the kernel's
// ephemeral range when possible: a consumer that keeps dialling a dead
// pusher's ephemeral port could connect to itself (TCP simultaneous open)
// and take the port the pusher restarts on. Ports are never handed out twice
// in one run.
func freePort(t testing.TB) int {
	t.Helper()
	ports.mu.Lock()
	defer ports.mu.Unlock()
	if ports.used == nil {
		ports.used = map[int]bool{}
	}
	for range 100 {
		p, err := kafkatest.FreePorts(1)
		if err != nil {
			t.Fatal(err)
		}
		if !ports.used[p[0]] {
			ports.used[p[0]] = true
			return p[0]
		}
	}
	t.Fatal("no free TCP port on 127.0.0.1")
	return 0
}

func freeAddr(t testing.TB) string {
	return "127.0.0.1:" + strconv.Itoa(freePort(t))
}

// ---------------------------------------------------------------------------
// Processes.

// proc is a ferry binary run as a child process. Restarts reuse the same
// flags and append to the same log file.
type proc struct {
	t        testing.TB
	name     string
	bin      string
	args     []string
	httpAddr string
	grpcAddr string // the pusher's, "" for consumers
	logPath  string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current run exited
	state   *os.ProcessState
	starts  int
	logFile *os.File
}

// newProc prepares a process; start runs it. It is killed when the test
// ends, and its log is dumped if the test failed.
func newProc(t testing.TB, name, bin, httpAddr string, args ...string) *proc {
	t.Helper()
	dir := t.TempDir() // registered before our cleanup, so removed after it
	p := &proc{
		t: t, name: name, bin: bin, httpAddr: httpAddr,
		args:    append([]string{"-http.listen-address=" + httpAddr}, args...),
		logPath: filepath.Join(dir, name+".log"),
	}
	t.Cleanup(func() {
		if p.running() {
			p.signal(syscall.SIGKILL)
			p.wait(10 * time.Second)
		}
		p.mu.Lock()
		if p.logFile != nil {
			_ = p.logFile.Close()
		}
		p.mu.Unlock()
		if t.Failed() {
			t.Logf("%s: log %s, last lines:\n%s", p.name, p.logPath, p.tail(30))
		}
		keepLog(t, p.logPath, p.name)
	})
	return p
}

// start runs the process and returns without waiting for readiness.
func (p *proc) start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.done) {
		p.t.Fatalf("%s: start: already running", p.name)
	}
	if p.logFile == nil {
		f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			p.t.Fatalf("%s: log file: %v", p.name, err)
		}
		p.logFile = f
	}
	p.starts++
	fmt.Fprintf(p.logFile, "=== chaos: start #%d of %s at %s: %s %s\n", p.starts, p.name,
		time.Now().Format(time.RFC3339Nano), filepath.Base(p.bin), strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout = p.logFile
	cmd.Stderr = p.logFile
	// If this test process dies, so do its children.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("%s: start: %v", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.state = cmd, done, nil
	go func() {
		_ = cmd.Wait()
		p.mu.Lock()
		p.state = cmd.ProcessState
		p.mu.Unlock()
		close(done)
	}()
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !isClosed(p.done)
}

func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return
	}
	_ = cmd.Process.Signal(sig)
}

// wait waits up to timeout for the current run to exit and returns its
// state, or nil on timeout.
func (p *proc) wait(timeout time.Duration) *os.ProcessState {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.state
	case <-time.After(timeout):
		return nil
	}
}

// kill SIGKILLs the process and waits until it is gone.
func (p *proc) kill() {
	p.t.Helper()
	p.signal(syscall.SIGKILL)
	if p.wait(10*time.Second) == nil {
		p.t.Fatalf("%s: still running 10s after SIGKILL", p.name)
	}
	p.mark("SIGKILL")
}

// mark writes a line into the process log, so the log shows what the test
// did to it and when.
func (p *proc) mark(what string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.logFile != nil {
		fmt.Fprintf(p.logFile, "=== chaos: %s %s at %s\n", what, p.name, time.Now().Format(time.RFC3339Nano))
	}
}

// waitReady polls /ready until it answers 200 and /metrics until it
// parses. It fails the test if the process exits or timeout passes first.
func (p *proc) waitReady(timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		if !p.running() {
			p.t.Fatalf("%s exited before it was ready (%v); log %s:\n%s", p.name, p.exitState(), p.logPath, p.tail(30))
		}
		code, body, err := httpGet(p.httpAddr, "/ready", nil)
		if err == nil && code == http.StatusOK {
			// Ready, and its metrics can be scraped.
			if _, err = scrape(p.httpAddr); err == nil {
				return
			}
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d %s", code, strings.TrimSpace(body))
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s not ready after %s (%s); log %s:\n%s", p.name, timeout, last, p.logPath, p.tail(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// runs returns how many times the process was started.
func (p *proc) runs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

func (p *proc) exitState() *os.ProcessState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// log returns the whole log file.
func (p *proc) log() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", p.logPath, err)
	}
	return string(b)
}

// tail returns the last n lines of the log.
func (p *proc) tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

// logLines returns the log lines containing substr.
func (p *proc) logLines(substr string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(p.log()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// HTTP: readiness, metrics, queries.

var httpClient = &http.Client{Timeout: 10 * time.Second}

func httpGet(addr, path string, header http.Header) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// metrics is one scrape of a /metrics endpoint.
type metrics map[string]*dto.MetricFamily

func scrape(addr string) (metrics, error) {
	code, body, err := httpGet(addr, "/metrics", nil)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	return metrics(mfs), nil
}

// value sums the samples of a counter, gauge or untyped metric whose labels
// include the given name=value pairs.
func (m metrics) value(name string, labelPairs ...string) float64 {
	mf, ok := m[name]
	if !ok {
		return 0
	}
	var sum float64
	for _, mt := range mf.GetMetric() {
		if !hasLabels(mt, labelPairs) {
			continue
		}
		switch {
		case mt.Counter != nil:
			sum += mt.GetCounter().GetValue()
		case mt.Gauge != nil:
			sum += mt.GetGauge().GetValue()
		case mt.Untyped != nil:
			sum += mt.GetUntyped().GetValue()
		}
	}
	return sum
}

func hasLabels(mt *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		found := false
		for _, lp := range mt.GetLabel() {
			if lp.GetName() == pairs[i] && lp.GetValue() == pairs[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// mustScrape scrapes a process's /metrics, failing the test on error.
func (p *proc) mustScrape() metrics {
	p.t.Helper()
	m, err := scrape(p.httpAddr)
	if err != nil {
		p.t.Fatalf("%s: %v", p.name, err)
	}
	return m
}

// queryScalar runs an instant query for a tenant and returns the value of
// its single result, or ok=false when the result is empty.
func queryScalar(addr, tenant, query string, at time.Time) (v float64, ok bool, err error) {
	q := url.Values{}
	q.Set("query", query)
	q.Set("time", strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64))
	code, body, err := httpGet(addr, "/api/v1/query?"+q.Encode(), http.Header{"X-Scope-Orgid": {tenant}})
	if err != nil {
		return 0, false, err
	}
	if code != http.StatusOK {
		return 0, false, fmt.Errorf("query %q for %s: HTTP %d: %s", query, tenant, code, body)
	}
	var r struct {
		Status string `json:"status"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return 0, false, fmt.Errorf("query %q: decoding %s: %w", query, body, err)
	}
	if r.Status != "success" || r.Data.ResultType != "vector" {
		return 0, false, fmt.Errorf("query %q: unexpected answer %s", query, body)
	}
	switch len(r.Data.Result) {
	case 0:
		return 0, false, nil
	case 1:
	default:
		return 0, false, fmt.Errorf("query %q: %d results, want 1", query, len(r.Data.Result))
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err = strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, false, fmt.Errorf("query %q: value %q: %w", query, s, err)
	}
	return v, true, nil
}

// ---------------------------------------------------------------------------
// Small helpers.

// waitFor polls cond every 100ms until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, timeout, 100*time.Millisecond, what, cond)
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
	}
}

// randDuration returns a uniformly random duration in [lo, hi].
func randDuration(lo, hi time.Duration) time.Duration {
	return lo + rand.N(hi-lo+1)
}

func formatOffsets(m map[int32]int64) string {
	var b bytes.Buffer
	for p := int32(0); p < int32(len(m))+16; p++ {
		if o, ok := m[p]; ok {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "p%d=%d", p, o)
		}
	}
	return b.String()
}
