package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// promProc is a Prometheus child with a fresh storage directory.
type promProc struct {
	*child
	addr string
}

// startPrometheus starts Prometheus as a remote-write receiver with no
// scrape targets, so its TSDB holds only what is written to it.
func (e *env) startPrometheus(ctx context.Context, bin, name string) (*promProc, error) {
	dir, err := os.MkdirTemp(e.work, name+"-")
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "prometheus.yml")
	// No scrape_configs: the only samples are the written ones.
	if err := os.WriteFile(conf, []byte("global:\n  scrape_interval: 1m\n"), 0o600); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	c, err := procs.start(name, bin, []string{
		"--config.file=" + conf, "--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr, "--web.enable-remote-write-receiver", "--log.level=warn",
	}, e.logDir)
	if err != nil {
		return nil, err
	}
	if err := waitURL(ctx, c, "http://"+addr+"/-/ready", 60*time.Second); err != nil {
		_ = c.stop(5 * time.Second)
		return nil, err
	}
	return &promProc{child: c, addr: addr}, nil
}

// appended reads Prometheus's appended-samples counter.
func (p *promProc) appended(ctx context.Context) (float64, error) {
	m, err := scrape(ctx, p.addr)
	if err != nil {
		return 0, err
	}
	return m.sum(appendedMetric, nil), nil
}

// watchAppended polls Prometheus every 100 ms until its counter reaches
// total, stop says to give up, or ctx ends; it returns when the counter
// reached total (0 if never) and the steady window.
func (p *promProc) watchAppended(ctx context.Context, start time.Time, total int64, stop func() error) (time.Duration, steadyWindow, error) {
	var w steadyWindow
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := p.appended(ctx)
		if err == nil {
			w.observe(time.Since(start), n, float64(total), nil)
			if n >= float64(total) {
				return time.Since(start), w, nil
			}
		}
		if err := stop(); err != nil {
			return 0, w, err
		}
		if p.exited() {
			return 0, w, fmt.Errorf("prometheus exited: %w", p.exitErr())
		}
		select {
		case <-ctx.Done():
			return 0, w, fmt.Errorf("prometheus did not append all %d samples within -stage-timeout: %w", total, ctx.Err())
		case <-tick.C:
		}
	}
}

// finish fills the end of a run from Prometheus and stops it.
func (p *promProc) finish(ctx context.Context, r *rwRun, cpu0 time.Duration) {
	if n, err := p.appended(ctx); err == nil {
		r.Appended = n
		if n != float64(r.Samples) {
			r.Check = strings.TrimPrefix(r.Check+fmt.Sprintf("; Prometheus appended %.0f of %d samples", n, r.Samples), "; ")
		}
	}
	r.PromCPU = p.usage().CPU - cpu0
	if err := p.stop(30 * time.Second); err != nil && r.Err == "" {
		r.Err = "stopping prometheus: " + err.Error()
	}
}
