// Package proctest runs Ferry's commands as processes in tests and reads
// what the kernel says of them: tests that bound a door's memory read it
// from the process (RSS), not from Go's heap, since what a client makes a
// process hold includes what the heap does not show.
package proctest

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/internal/kafkatest"
)

// Build builds the command of the module's package pkg (such as
// "./services/ferry-pusher") into a temporary directory and returns the
// binary's path.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	root, err := kafkatest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// FreeAddr returns a loopback address whose port is free now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

// RSS returns process pid's resident set size now (VmRSS), in bytes.
func RSS(t testing.TB, pid int) int64 { return status(t, pid, "VmRSS") }

// PeakRSS returns process pid's largest resident set size so far (VmHWM),
// in bytes.
func PeakRSS(t testing.TB, pid int) int64 { return status(t, pid, "VmHWM") }

// status reads one size field of /proc/pid/status. Without /proc (not
// Linux) the test is skipped: the figure does not exist there.
func status(t testing.TB, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("/proc/%d/status: %s: %v", pid, field, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
