package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// profilePipeline re-runs the pipeline of a backlog under Linux perf
// (cpu-clock sampling with frame-pointer call graphs, which Go keeps on
// amd64 and arm64): one profile of the consumer processes, one of the pusher.
// The consumers and the pusher serve no pprof, and perf needs no change to
// them.
func (e *env) profilePipeline(ctx context.Context, bl *backlog, backend string) (res profileResult) {
	res = profileResult{Backend: backend, Shape: bl.Shape, Duration: e.cfg.ProfileDuration}
	if _, err := exec.LookPath("perf"); err != nil {
		res.Err = "perf not found on PATH: profile the micro-benchmarks instead (go test -bench ... -cpuprofile)"
		return res
	}
	name := "profile-" + backend
	cdata := filepath.Join(e.work, name+"-consumer.perf")
	pdata := filepath.Join(e.work, name+"-pusher.perf")
	var perfErr error
	st := e.runPipeline(ctx, bl, name, pipelineOpts{
		backend:     backend,
		untilDuring: true,
		during: func(ctx context.Context, cs []*consumerProc, p *pusherProc) {
			// Skip the start-up second: connections, offsets, first fetch.
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			var pids []string
			for _, c := range cs {
				pids = append(pids, strconv.Itoa(c.pid()))
			}
			errc := make(chan error, 1)
			go func() {
				errc <- perfRecord(ctx, pdata, strconv.Itoa(p.pid()), e.cfg.ProfileDuration, e.logDir, name+"-pusher")
			}()
			perfErr = perfRecord(ctx, cdata, strings.Join(pids, ","), e.cfg.ProfileDuration, e.logDir, name+"-consumer")
			perfErr = errors.Join(perfErr, <-errc)
		},
	})
	if st.Err != "" {
		res.Err = st.Err
		return res
	}
	if perfErr != nil {
		res.Err = perfErr.Error()
		return res
	}
	var err1, err2, err3, err4 error
	res.Consumer, err1 = perfReport(ctx, cdata, false)
	res.Pusher, err2 = perfReport(ctx, pdata, false)
	res.ConsumerInclusive, err3 = perfReport(ctx, cdata, true)
	res.PusherInclusive, err4 = perfReport(ctx, pdata, true)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		res.Err = err.Error()
	}
	return res
}

// perfRecord records pids with perf for d, or until ctx ends (the stage
// finished first: SIGINT makes perf write what it has), and returns when
// perf has written out.
func perfRecord(ctx context.Context, out, pids string, d time.Duration, logDir, name string) error {
	cmd := exec.Command("perf", "record", "-q", "-e", "cpu-clock", "-F", "997", "-g", "-o", out, "-p", pids,
		"--", "sleep", strconv.FormatFloat(d.Seconds(), 'f', 1, 64))
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("perf record: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			err = <-done
		}
	}
	_ = writeFile(filepath.Join(logDir, name+"-perf.log"), buf.String())
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("perf record for %s: %w: %s", name, err, strings.TrimSpace(buf.String()))
	}
	return nil
}

// perfReport summarises a perf data file: the top symbols by self time, or
// by inclusive (children) time.
func perfReport(ctx context.Context, data string, inclusive bool) ([]profileEntry, error) {
	args := []string{"report", "-i", data, "--stdio", "--sort", "sym", "-g", "none", "--percent-limit", "0.5"}
	if inclusive {
		args = append(args, "--children")
	} else {
		args = append(args, "--no-children")
	}
	out, err := exec.CommandContext(ctx, "perf", args...).Output()
	if err != nil {
		return nil, fmt.Errorf("perf report %s: %w", data, err)
	}
	var entries []profileEntry
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		// "12.34%  [.] sym" or, with --children, "45.00%  0.50%  [.] sym".
		if len(f) < 3 || !strings.HasSuffix(f[0], "%") {
			continue
		}
		pct, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
		if err != nil {
			continue
		}
		i := 1
		for i < len(f) && strings.HasSuffix(f[i], "%") {
			i++
		}
		if i < len(f) && strings.HasPrefix(f[i], "[") {
			i++
		}
		if i >= len(f) {
			continue
		}
		entries = append(entries, profileEntry{Percent: pct, Symbol: strings.Join(f[i:], " ")})
		if len(entries) == 40 {
			break
		}
	}
	return entries, sc.Err()
}
