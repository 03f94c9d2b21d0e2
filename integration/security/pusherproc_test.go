package security

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/proctest"
)

// pusherProc is bin/ferry-pusher run as a child process with the discard
// backend.
type pusherProc struct {
	cmd      *exec.Cmd
	grpcAddr string
	httpAddr string
}

// startPusherProc runs the pusher binary with args added to its listen
// addresses and backend, waits until it is ready and stops it when the
// test ends.
func startPusherProc(t *testing.T, args ...string) *pusherProc {
	t.Helper()
	bin := proctest.Build(t, "./services/ferry-pusher")
	p := &pusherProc{grpcAddr: proctest.FreeAddr(t), httpAddr: proctest.FreeAddr(t)}
	log, err := os.Create(filepath.Join(t.TempDir(), "pusher.log"))
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, append([]string{"-grpc.listen-address=" + p.grpcAddr, "-http.listen-address=" + p.httpAddr, "-pusher.backend=discard"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		_ = log.Close()
		if t.Failed() {
			if b, err := os.ReadFile(log.Name()); err == nil {
				t.Logf("pusher log:\n%s", lastLines(string(b), 30))
			}
		}
	})
	waitUntil(t, 30*time.Second, "the pusher ready", func() error {
		resp, err := http.Get("http://" + p.httpAddr + "/ready")
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errorf("/ready: %s", resp.Status)
		}
		return nil
	})
	return p
}

// rss returns the process's resident memory, in bytes, from /proc.
func (p *pusherProc) rss(t *testing.T) int64 { return proctest.RSS(t, p.cmd.Process.Pid) }

// metric returns the value of the series named exactly series (name and
// labels as /metrics prints them) from the pusher's /metrics, or -1 when
// it is not there.
func (p *pusherProc) metric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	return -1
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
