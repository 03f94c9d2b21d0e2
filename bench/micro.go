package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
)

// microPackages hold the Go micro-benchmarks of the hot paths.
var microPackages = []string{"./proto/codec", "./consumer", "./pusher", "./pusher/tsdbstore"}

// runMicro runs the Go micro-benchmarks once and keeps their result lines.
// FERRY_KAFKA_FAKE=1: the consumer package's TestMain would otherwise start
// a real broker that no benchmark uses.
func (e *env) runMicro(ctx context.Context) microResult {
	args := append([]string{"test", "-run", "^$", "-bench", ".", "-benchmem", "-count", "1", "-benchtime", e.cfg.MicroBenchtime}, microPackages...)
	res := microResult{Command: "FERRY_KAFKA_FAKE=1 go " + strings.Join(quoteArgs(args), " ")}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = e.root
	cmd.Env = append(os.Environ(), "FERRY_KAFKA_FAKE=1", "CI=") // -run '^$': no test runs, so CI=true has nothing to guard
	out, err := cmd.CombinedOutput()
	sc := bufio.NewScanner(bytes.NewReader(out))
	cpuSeen := false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "cpu:"):
			if !cpuSeen {
				res.Lines = append(res.Lines, line)
			}
			cpuSeen = true
		case strings.HasPrefix(line, "Benchmark"), strings.HasPrefix(line, "pkg:"):
			res.Lines = append(res.Lines, line)
		}
	}
	if err != nil {
		res.Err = err.Error() + "\n" + tail(string(out), 20)
	}
	return res
}

func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, "^$*? ") {
			a = "'" + a + "'"
		}
		out[i] = a
	}
	return out
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
