package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCtrlCStopsTheDevModeWithExitCode0 builds ferry-dev, runs it until
// its first status line, interrupts it as Ctrl-C does, and expects a final
// status line and exit code 0; the log must not carry the TSDB's
// per-tenant info lines, which would bury the status lines.
func TestCtrlCStopsTheDevModeWithExitCode0(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "ferry-dev")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, bin, "-partitions", "2", "-status-interval", "300ms",
		"-storage.path", filepath.Join(dir, "data"), "-grpc.listen-address", "127.0.0.1:0",
		"-http.listen-address", "127.0.0.1:0", "-consumer.http-base-port", "0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "log")
	logs, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	var out []string
	for lines.Scan() {
		out = append(out, lines.Text())
		if strings.HasPrefix(lines.Text(), "status: ") {
			break
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for lines.Scan() {
		out = append(out, lines.Text())
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("ferry-dev was killed by %v, want exit code 0\n%s", ws.Signal(), strings.Join(out, "\n"))
		}
	}
	if err != nil {
		log, _ := os.ReadFile(logFile)
		t.Fatalf("ferry-dev after SIGINT: %v, want exit code 0\nstdout:\n%s\nlog:\n%s", err, strings.Join(out, "\n"), log)
	}
	all := strings.Join(out, "\n")
	for _, want := range []string{"status pages: pusher http://", "status: produced=", "final: produced="} {
		if !strings.Contains(all, want) {
			t.Errorf("stdout lacks %q:\n%s", want, all)
		}
	}
	log, _ := os.ReadFile(logFile)
	for _, noisy := range []string{"Replaying WAL", "WAL replay completed", `msg="Replaying on-disk memory mappable chunks`} {
		if strings.Contains(string(log), noisy) {
			t.Errorf("the log has the TSDB's %q at info level:\n%s", noisy, log)
		}
	}
}
