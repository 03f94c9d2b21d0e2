package services_test

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/kafkatest"
)

// TestBuiltBinariesReportTheirVersion builds the three services with the
// -ldflags `make build` uses (read from `make ldflags`, so a Makefile that
// stops stamping the version fails here), then checks what operators' tools
// read: `-version` prints the version, revision, branch and Go version, and
// /metrics serves ferry_build_info with the same labels.
func TestBuiltBinariesReportTheirVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	root, err := kafkatest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	const version, branch, revision = "v9.8.7-test", "release-9.8", "0123456789abcdef0123456789abcdef01234567"
	mk := exec.Command("make", "-s", "--no-print-directory", "ldflags",
		"VERSION="+version, "BRANCH="+branch, "REVISION="+revision)
	mk.Dir = root
	ldflags, err := mk.Output()
	if err != nil {
		t.Fatalf("make ldflags: %v", err)
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-ldflags", strings.TrimSpace(string(ldflags)), "-o", bin+"/",
		"./services/ferry-gateway", "./services/ferry-consumer", "./services/ferry-pusher")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ports, err := kafkatest.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	for i, svc := range []struct {
		name string
		args []string
	}{
		// Kafka and the pusher are unreachable addresses: the processes
		// serve /metrics while they wait for them.
		{"ferry-gateway", []string{"-kafka.address", "127.0.0.1:1"}},
		{"ferry-consumer", []string{"-instance-id", "consumer-0", "-kafka.address", "127.0.0.1:1", "-pusher.address", "127.0.0.1:2"}},
		{"ferry-pusher", []string{"-grpc.listen-address", "127.0.0.1:0", "-storage.path", t.TempDir()}},
	} {
		t.Run(svc.name, func(t *testing.T) {
			path := filepath.Join(bin, svc.name)
			out, err := exec.Command(path, "-version").Output()
			if err != nil {
				t.Fatalf("%s -version: %v", svc.name, err)
			}
			for _, want := range []string{
				svc.name + ", version " + version + " (branch: " + branch + ", revision: " + revision + ")",
				"go version:       " + runtime.Version(),
			} {
				if !strings.Contains(string(out), want) {
					t.Errorf("%s -version printed\n%s\nwant a line with %q", svc.name, out, want)
				}
			}
			addr := "127.0.0.1:" + strconv.Itoa(ports[i])
			metrics := scrapeRunning(t, path, append(svc.args, "-http.listen-address", addr), "http://"+addr+"/metrics")
			info := regexp.MustCompile(`(?m)^ferry_build_info\{([^}]*)\} 1$`).FindStringSubmatch(metrics)
			if info == nil {
				t.Fatalf("%s /metrics has no ferry_build_info 1:\n%.2000s", svc.name, metrics)
			}
			for _, label := range []string{
				`version="` + version + `"`, `branch="` + branch + `"`, `revision="` + revision + `"`,
				`goversion="` + runtime.Version() + `"`,
			} {
				if !strings.Contains(info[1], label) {
					t.Errorf("%s ferry_build_info{%s}: want %s", svc.name, info[1], label)
				}
			}
		})
	}
}

// scrapeRunning starts the binary with args, waits up to 20 s for url to
// answer 200 and returns its body; the process is killed when the test ends.
func scrapeRunning(t *testing.T, path string, args []string, url string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			body, readErr := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if readErr == nil && resp.StatusCode == http.StatusOK {
				return string(body)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s did not answer within 20 s (last error %v)", path, url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
