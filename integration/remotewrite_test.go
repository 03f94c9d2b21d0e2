package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/loadgen"
	pusherapp "github.com/ferrylabs/ferry/pusher/app"
)

// The tests here run the remote-write backend against a real Prometheus
// (Debian's 2.42) started with --web.enable-remote-write-receiver: the
// full path Kafka -> consumer -> pusher(remote-write) -> Prometheus, with
// every sample checked through Prometheus's own query API.

const prometheusPath = "/usr/bin/prometheus"

// receiver is a Prometheus process the test owns: on a fixed loopback
// port and data directory, so that it can be SIGKILLed and started again
// where it was.
type receiver struct {
	t     *testing.T
	name  string
	addr  string
	dir   string
	args  []string // the command line, the binary first
	ready string   // the path that answers 200 once it takes writes
	flush string   // a path that makes what it acknowledged searchable, or ""

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// startReceiver starts Prometheus, or skips the test when it is not
// installed (fails under CI=true, where .ci/run installs it).
func startReceiver(t *testing.T) *receiver {
	t.Helper()
	if _, err := os.Stat(prometheusPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is required under CI=true: %v", prometheusPath, err)
		}
		t.Skipf("%s not installed (apt-get install prometheus): %v", prometheusPath, err)
	}
	addr, dir := freeAddr(t), t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte("global: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return runReceiver(t, &receiver{name: "prometheus", addr: addr, dir: dir, ready: "/-/ready", args: []string{
		prometheusPath,
		"--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--web.enable-remote-write-receiver",
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr,
	}})
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// runReceiver starts r and kills it when the test ends.
func runReceiver(t *testing.T, r *receiver) *receiver {
	t.Helper()
	r.t = t
	r.start()
	t.Cleanup(r.kill)
	return r
}

// url is the receiver's remote-write endpoint.
func (r *receiver) url() string { return "http://" + r.addr + "/api/v1/write" }

func (r *receiver) start() {
	r.t.Helper()
	cmd := exec.Command(r.args[0], r.args[1:]...)
	if os.Getenv("FERRY_TEST_LOGS") != "" {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("start %s: %v", r.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	r.mu.Lock()
	r.cmd, r.done = cmd, done
	r.mu.Unlock()
	waitFor(r.t, 60*time.Second, r.name+" ready on "+r.addr, func() bool {
		select {
		case <-done:
			r.t.Fatalf("%s exited during start-up (FERRY_TEST_LOGS=1 shows why)", r.name)
		default:
		}
		return probe("http://"+r.addr+r.ready) == nil
	})
}

// probe returns nil when a GET of url answers 200.
func probe(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// kill SIGKILLs the receiver and waits for it to be gone.
func (r *receiver) kill() { r.signal(syscall.SIGKILL) }

// stop asks the receiver to shut down (SIGTERM) and waits for it to be
// gone: for a receiver that acknowledges writes before they are on disk.
func (r *receiver) stop() { r.signal(syscall.SIGTERM) }

func (r *receiver) signal(sig syscall.Signal) {
	r.mu.Lock()
	cmd, done := r.cmd, r.done
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	<-done
}

// remoteWritePusherConfig is a pusher with the remote-write backend
// sending to url.
func remoteWritePusherConfig(t *testing.T, url string) pusherapp.Config {
	t.Helper()
	cfg := pusherConfig(t, t.TempDir())
	cfg.Backend = pusherapp.BackendRemoteWrite
	cfg.RemoteWrite.URL = url
	cfg.RemoteWrite.Timeout = 5 * time.Second
	if err := cfg.Validate(); err != nil {
		t.Fatalf("pusher config: %v", err)
	}
	return cfg
}

// checkReceiver asks Prometheus, for every tenant and series, the count
// and the sum of the samples over the whole run, and fails unless each
// is exactly what was produced: a missing sample lowers the count, and a
// sample stored twice is impossible in a TSDB (identical duplicates are
// dropped), so an exact count is no loss. Prometheus is single-tenant: a
// series is told apart by its instance label, which names the tenant.
func checkReceiver(t *testing.T, addr string, d dataset) {
	t.Helper()
	for i := range d.tenants {
		tenant := loadgen.Tenant(i)
		for s := range d.shape.Series {
			sel := fmt.Sprintf(`ferry_demo_value{instance="demo-%s",series="%d"}%s`, tenant, s, d.rangeSelector())
			count := queryValue(t, addr, "", "count_over_time("+sel+")", d.at())
			sum := queryValue(t, addr, "", "sum_over_time("+sel+")", d.at())
			if count != float64(d.steps) {
				t.Errorf("count_over_time(%s) = %v, want %d", sel, count, d.steps)
			}
			if want := d.wantSum(s); sum != want {
				t.Errorf("sum_over_time(%s) = %v, want %v", sel, sum, want)
			}
		}
	}
}

// httpStatus returns the status code of a GET of url.
func httpStatus(t *testing.T, url string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// gatheredSum sums a metric's samples over all its label values.
func gatheredSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestRemoteWriteToPrometheus runs the full path to a real Prometheus and
// SIGKILLs Prometheus while records flow: the pusher answers SERVER_ERROR
// while it is down, the consumers retry, and after Prometheus restarts on
// its data directory every sample is there exactly once.
func TestRemoteWriteToPrometheus(t *testing.T) {
	t.Parallel()
	recv := startReceiver(t)
	remoteWriteThroughAnOutage(t, recv, recv.kill)
}

// remoteWriteThroughAnOutage runs the full path to recv, takes recv down
// with down while records flow, starts it again on its data and checks
// that every sample is there exactly once.
func remoteWriteThroughAnOutage(t *testing.T, recv *receiver, down func()) {
	t.Helper()
	const partitions = 4
	d := dataset{shape: loadgen.Shape{Series: 5, StartMs: recentStart(), StepMs: 1000}, tenants: 8, steps: 300}
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, partitions)
	group := "ferry-" + topic

	p := startPusher(t, remoteWritePusherConfig(t, recv.url()))
	// The receiver serves queries; the pusher is ready without any TSDB.
	for path, want := range map[string]int{"/ready": http.StatusOK, "/api/v1/query?query=up": http.StatusNotFound} {
		if got := httpStatus(t, "http://"+p.HTTPAddr()+path); got != want {
			t.Errorf("GET %s on the pusher: %d, want %d", path, got, want)
		}
	}
	cs := startConsumers(t, b, topic, group, p.GRPCAddr(), partitions)
	cl := manualClient(t, b)
	n := produceSteps(t, cl, topic, d.shape, d.tenants, partitions, 0, d.steps/2)
	// Down once part of the first half is through, so requests are in
	// flight at the receiver when it goes.
	waitFor(t, time.Minute, "a quarter of the requests at the receiver", func() bool {
		return gatheredSum(t, p.Registry, "ferry_pusher_remote_write_requests_total") >= float64(n/2)
	})
	down()
	n += produceSteps(t, cl, topic, d.shape, d.tenants, partitions, d.steps/2, d.steps/2)
	waitFor(t, time.Minute, "retries signalled while the receiver is down", func() bool {
		return gatheredSum(t, p.Registry, "ferry_pusher_remote_write_retries_signalled_total") > 0
	})
	recv.start()

	waitCommittedToEnd(t, b, group, topic, 2*time.Minute)
	acks := ackTotals(cs)
	if acks["ok"]+acks["client_error"] != int64(n) {
		t.Errorf("consumers counted acks %v, want ok + client_error = %d", acks, n)
	}
	if recv.flush != "" {
		if got := httpStatus(t, "http://"+recv.addr+recv.flush); got != http.StatusOK {
			t.Fatalf("GET %s on %s: %d", recv.flush, recv.name, got)
		}
	}
	checkReceiver(t, recv.addr, d)
	stopAll(t, cs)
	t.Logf("%d records, acks %v, retries signalled %v", n, acks,
		gatheredSum(t, p.Registry, "ferry_pusher_remote_write_retries_signalled_total"))
}

// service is a stand-in for a Kubernetes Service in front of pushers: a
// TCP forwarder that sends each new connection to the next live pusher.
// kill makes a pusher vanish the way a SIGKILLed process does for its
// peers: every connection to it is cut at once, and no new one reaches it.
type service struct {
	l net.Listener

	mu       sync.Mutex
	backends []string
	dead     map[string]bool
	conns    map[string][]net.Conn
	next     int
}

func newService(t *testing.T, backends ...string) *service {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &service{l: l, backends: backends, dead: map[string]bool{}, conns: map[string][]net.Conn{}}
	go s.serve()
	t.Cleanup(func() {
		_ = l.Close()
		for _, b := range backends {
			s.kill(b)
		}
	})
	return s
}

func (s *service) addr() string { return s.l.Addr().String() }

func (s *service) serve() {
	for {
		c, err := s.l.Accept()
		if err != nil {
			return
		}
		go s.forward(c)
	}
}

// pick returns the next live backend, or "" when none is.
func (s *service) pick() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range s.backends {
		b := s.backends[s.next%len(s.backends)]
		s.next++
		if !s.dead[b] {
			return b
		}
	}
	return ""
}

func (s *service) forward(c net.Conn) {
	b := s.pick()
	if b == "" {
		_ = c.Close()
		return
	}
	up, err := net.Dial("tcp", b)
	if err != nil {
		_ = c.Close()
		return
	}
	s.mu.Lock()
	if s.dead[b] {
		s.mu.Unlock()
		_ = c.Close()
		_ = up.Close()
		return
	}
	s.conns[b] = append(s.conns[b], c, up)
	s.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
	_, _ = io.Copy(c, up)
	_ = c.Close()
}

// kill cuts every connection to backend b and sends no more to it.
func (s *service) kill(b string) {
	s.mu.Lock()
	s.dead[b] = true
	conns := s.conns[b]
	s.conns[b] = nil
	s.mu.Unlock()
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, as from a dead process
		}
		_ = c.Close()
	}
}

// TestRemoteWriteTwoPushersOneKilled scales the push tier out: two
// stateless remote-write pushers behind one address, four consumers
// split between them, one pusher killed mid-run. The consumers on it
// reconnect through the same address to the survivor and resend; every
// sample reaches Prometheus. Resent requests the dead pusher had already
// delivered are identical duplicates (accepted) or, when a later request
// of the tenant was delivered too, out-of-order answers (400, counted as
// client errors): either way the samples are stored once.
func TestRemoteWriteTwoPushersOneKilled(t *testing.T) {
	t.Parallel()
	const partitions = 4
	d := dataset{shape: loadgen.Shape{Series: 5, StartMs: recentStart(), StepMs: 1000}, tenants: 8, steps: 300}
	recv := startReceiver(t)
	b := kafkatest.Current(t)
	topic := b.CreateTopic(t, partitions)
	group := "ferry-" + topic

	pa := startPusher(t, remoteWritePusherConfig(t, recv.url()))
	pb := startPusher(t, remoteWritePusherConfig(t, recv.url()))
	svc := newService(t, pa.GRPCAddr(), pb.GRPCAddr())
	cs := startConsumers(t, b, topic, group, svc.addr(), partitions)
	n := produceSteps(t, manualClient(t, b), topic, d.shape, d.tenants, partitions, 0, d.steps)
	waitFor(t, time.Minute, "both pushers sending", func() bool {
		return gatheredSum(t, pa.Registry, "ferry_pusher_remote_write_requests_total") > 0 &&
			gatheredSum(t, pb.Registry, "ferry_pusher_remote_write_requests_total") > 0
	})
	waitFor(t, time.Minute, "a third of the requests at the receiver", func() bool {
		return gatheredSum(t, pa.Registry, "ferry_pusher_remote_write_requests_total")+
			gatheredSum(t, pb.Registry, "ferry_pusher_remote_write_requests_total") >= float64(n/3)
	})
	svc.kill(pa.GRPCAddr())
	// The killed pusher's process would be gone: stop it, which its
	// consumers no longer see.
	if err := pa.stop(t); err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("killed pusher: %v", err)
	}

	waitCommittedToEnd(t, b, group, topic, 2*time.Minute)
	acks := ackTotals(cs)
	if acks["ok"]+acks["client_error"] < int64(n) {
		t.Errorf("consumers counted acks %v, want ok + client_error >= %d", acks, n)
	}
	if recv.flush != "" {
		if got := httpStatus(t, "http://"+recv.addr+recv.flush); got != http.StatusOK {
			t.Fatalf("GET %s on %s: %d", recv.flush, recv.name, got)
		}
	}
	checkReceiver(t, recv.addr, d)
	stopAll(t, cs)
	t.Logf("%d records, acks %v", n, acks)
}
