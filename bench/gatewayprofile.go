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
func (e gatewayStage) gatewayProfile(ctx context.Context, httpAddr, file string, seconds int) profileOut {
	out := profileOut{path: filepath.Join(e.work, file), seconds: float64(seconds)}
	if err := fetchTo(ctx, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", httpAddr, seconds), out.path); err != nil {
		out.err = fmt.Errorf("fetch profile: %w", err)
		return out
	}
	for _, cum := range []bool{false, true} {
		args := []string{"tool", "pprof", "-top", fmt.Sprintf("-nodecount=%d", profileRows)}
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

// profileWindow starts, when on, a profile of the gateway over the next
// gateway window after its warm-up (into file in the work directory); nil
// when off.
func (e gatewayStage) profileWindow(ctx context.Context, on bool, httpAddr, file string) chan profileOut {
	if !on {
		return nil
	}
	cfg := e.cfg.Gateway
	prof := make(chan profileOut, 1)
	go func() {
		if !sleepCtx(ctx, cfg.Warmup) {
			prof <- profileOut{err: ctx.Err()}
			return
		}
		prof <- e.gatewayProfile(ctx, httpAddr, file, max(1, int(cfg.Duration.Seconds())-1))
	}()
	return prof
}

// awaitProfile waits for the profile profileWindow started, if any, and
// logs its failure.
func awaitProfile(e *env, prof chan profileOut) (profileOut, bool) {
	if prof == nil {
		return profileOut{}, false
	}
	p := <-prof
	if p.err != nil {
		e.logf("gateway profile: %v", p.err)
		return p, false
	}
	return p, true
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
