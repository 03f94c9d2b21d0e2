package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// env is what every stage shares: the broker, clients, binaries and the
// temporary work directory.
type env struct {
	cfg    Config
	root   string // module root
	work   string // temporary directory of this run
	logDir string
	*kafkaSide

	consumerBin, pusherBin string
	codeVersion            string
	logf                   func(format string, args ...any)
}

// build compiles the two services into the bin directory.
func (e *env) build(ctx context.Context) error {
	dir := e.cfg.BinDir
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(e.root, dir)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	// The stages run a private build in the work directory: a `make build`
	// elsewhere must not swap the binaries between two stages of one run.
	private := filepath.Join(e.work, "bin")
	for _, out := range []string{dir, private} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", out+string(filepath.Separator),
			"./services/ferry-consumer", "./services/ferry-pusher", "./services/ferry-gateway")
		cmd.Dir = e.root
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %w\n%s", err, b)
		}
	}
	e.consumerBin = filepath.Join(private, "ferry-consumer")
	e.pusherBin = filepath.Join(private, "ferry-pusher")
	e.codeVersion = codeVersion(ctx, e.root)
	return nil
}

// codeVersion names the code that was built: the commit, and how many
// files differ from it.
func codeVersion(ctx context.Context, root string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown (not a git checkout)"
	}
	v := "commit " + strings.TrimSpace(string(out))
	st, err := exec.CommandContext(ctx, "git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output()
	if err == nil {
		if n := len(strings.FieldsFunc(string(st), func(r rune) bool { return r == '\n' })); n > 0 {
			v += fmt.Sprintf(" with %d modified files", n)
		}
	}
	return v
}

// pusherProc is a ferry-pusher child.
type pusherProc struct {
	*child
	grpcAddr, httpAddr string
}

// startPusher starts ferry-pusher with the given backend and waits until
// its HTTP port answers /ready. A tsdb pusher gets a fresh -storage.path
// unless extra names one.
func (e *env) startPusher(ctx context.Context, name, backend string, extra ...string) (*pusherProc, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		g, err1 := freeAddr()
		h, err2 := freeAddr()
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		args := []string{
			"-grpc.listen-address=" + g, "-http.listen-address=" + h,
			"-pusher.backend=" + backend, "-log.level=warn",
		}
		if backend == "tsdb" && !slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, "-storage.path=") }) {
			dir, err := os.MkdirTemp(e.work, "tsdb-"+name+"-")
			if err != nil {
				return nil, err
			}
			args = append(args, "-storage.path="+dir)
		}
		args = append(append(args, extra...), e.cfg.PusherArgs...)
		c, err := procs.start(name, e.pusherBin, args, e.logDir)
		if err != nil {
			return nil, err
		}
		p := &pusherProc{child: c, grpcAddr: g, httpAddr: h}
		if lastErr = waitReady(ctx, c, h, 30*time.Second); lastErr == nil {
			return p, nil
		}
		if c.refusedCommandLine() {
			// Another attempt would be refused the same way.
			return nil, refusal(c, append(slices.Clone(extra), e.cfg.PusherArgs...))
		}
		_ = c.stop(5 * time.Second)
	}
	return nil, lastErr
}

// exitBadCommandLine is the status Ferry's commands exit with when they
// refuse their command line (internal/cli): an unknown flag, as a binary
// older than the flag has, or a value that does not validate.
const exitBadCommandLine = 2

// refusedCommandLine reports whether the child exited because it refused
// its command line.
func (c *child) refusedCommandLine() bool {
	return c.exited() && c.cmd.ProcessState != nil && c.cmd.ProcessState.ExitCode() == exitBadCommandLine
}

// refusal explains a child that refused its command line: its own last
// word, which names the flag it refused, and the flags the stage added to
// the harness's own, the likely cause when a binary predates one of them.
func refusal(c *child, added []string) error {
	flags := "none"
	if len(added) > 0 {
		flags = strings.Join(added, " ")
	}
	return fmt.Errorf("%s refused its command line (exit status %d): %q; flags beyond the harness's own: %s (is the binary older?)",
		c.name, exitBadCommandLine, strings.TrimSpace(c.logTail(1)), flags)
}

// consumerProc is a ferry-consumer child.
type consumerProc struct {
	*child
	httpAddr string
}

// startConsumers starts one ferry-consumer per partition (consumer-N reads
// partition N) against pusherAddr, committing to group.
func (e *env) startConsumers(_ context.Context, name, topic, group, pusherAddr string, partitions int, extra ...string) ([]*consumerProc, error) {
	var out []*consumerProc
	for i := range partitions {
		h, err := freeAddr()
		if err != nil {
			return out, err
		}
		args := []string{
			"-kafka.address=" + e.broker.addrs[0], "-kafka.topic=" + topic, "-kafka.consumer-group=" + group,
			"-instance-id=consumer-" + strconv.Itoa(i), "-pusher.address=" + pusherAddr,
			"-http.listen-address=" + h, "-log.level=warn",
		}
		args = append(append(args, extra...), e.cfg.ConsumerArgs...)
		c, err := procs.start(fmt.Sprintf("%s-consumer-%d", name, i), e.consumerBin, args, e.logDir)
		if err != nil {
			return out, err
		}
		out = append(out, &consumerProc{child: c, httpAddr: h})
	}
	return out, nil
}

// waitReady polls http://addr/ready, Ferry's readiness endpoint, until it
// answers 200.
func waitReady(ctx context.Context, c *child, addr string, timeout time.Duration) error {
	return waitURL(ctx, c, "http://"+addr+"/ready", timeout)
}

// waitURL polls url until it answers 200, failing early when the child
// exited.
func waitURL(ctx context.Context, c *child, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := httpClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if c.exited() {
			return fmt.Errorf("%s exited during start-up: %w", c.name, c.exitErr())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s after %s (log %s)", c.name, url, timeout, c.logPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stopAll stops consumers first (their final commit needs the pusher), then
// the pusher, returning the first error.
func stopAll(cs []*consumerProc, p *pusherProc) error {
	var errs []error
	// Signalled together, they shut down in parallel; each is then
	// waited for without a second signal (awaitExit).
	for _, c := range cs {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range cs {
		errs = append(errs, c.awaitExit(40*time.Second))
	}
	if p != nil {
		errs = append(errs, p.stop(40*time.Second))
	}
	return errors.Join(errs...)
}

// brokerCPU is the CPU time of a broker we started, 0 otherwise.
func (e *env) brokerCPU() time.Duration {
	if e.broker.pid == 0 {
		return 0
	}
	u, err := readUsage(e.broker.pid)
	if err != nil {
		return 0
	}
	return u.CPU
}
