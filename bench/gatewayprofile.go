package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// profileOut is a CPU profile of the gateway, summarised.
type profileOut struct {
	path     string
	seconds  float64
	top, cum []string
	err      error
}

// gatewayProfile fetches a CPU profile of the gateway over seconds and
// summarises it with go tool pprof: the top functions by self time and by
// cumulative time.
func (e gatewayStage) gatewayProfile(ctx context.Context, httpAddr string, seconds int) profileOut {
	out := profileOut{path: filepath.Join(e.work, "gateway.cpu.pprof"), seconds: float64(seconds)}
	if err := fetchTo(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", httpAddr, seconds), out.path); err != nil {
		out.err = fmt.Errorf("fetch profile: %w", err)
		return out
	}
	for _, cum := range []bool{false, true} {
		args := []string{"tool", "pprof", "-top", "-nodecount=25"}
		if cum {
			args = append(args, "-cum")
		}
		b, err := exec.CommandContext(ctx, "go", append(args, e.gatewayBin(), out.path)...).Output()
		if err != nil {
			out.err = fmt.Errorf("go tool pprof: %w", err)
			return out
		}
		lines := pprofTop(string(b))
		if cum {
			out.cum = lines
		} else {
			out.top = lines
		}
	}
	return out
}

// fetchTo saves the answer to GET url in path.
func fetchTo(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// pprofTop keeps the table rows of go tool pprof -top output.
func pprofTop(s string) []string {
	var out []string
	inTable := false
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, "flat%") && strings.Contains(l, "cum%") {
			inTable = true
			continue
		}
		if inTable && strings.TrimSpace(l) != "" {
			out = append(out, strings.TrimRight(l, " \t\r"))
		}
	}
	return out
}
