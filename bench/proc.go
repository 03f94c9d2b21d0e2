package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// usage is what /proc says about a process at one moment.
type usage struct {
	CPU     time.Duration // utime + stime
	PeakRSS int64         // VmHWM, bytes
	RSS     int64         // VmRSS, bytes
	// MinorFaults counts the page faults served without I/O: for a Go
	// process, nearly all of them are its heap touching fresh memory, whose
	// zeroing the kernel pays for.
	MinorFaults int64
}

// readUsage reads the CPU time and memory of pid from /proc.
func readUsage(pid int) (usage, error) {
	var u usage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// The command name may hold spaces and parentheses: fields start after
	// the last ')'. minflt, utime and stime are fields 10, 14 and 15
	// (1-based), that is the 8th, 12th and 13th from the state field.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return u, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return u, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	flt, err3 := strconv.ParseInt(f[7], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return u, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	u.CPU = time.Duration(ut+st) * time.Second / clockTicks
	u.MinorFaults = flt
	status, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	defer func() { _ = status.Close() }()
	sc := bufio.NewScanner(status)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch name {
		case "VmHWM":
			u.PeakRSS = parseKB(val)
		case "VmRSS":
			u.RSS = parseKB(val)
		}
	}
	return u, sc.Err()
}

func parseKB(s string) int64 {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(f[0], 10, 64)
	return n * 1024
}

// selfCPU returns the CPU time of the harness process so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// child is a process started by the harness: a consumer or a pusher.
type child struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
	last    usage // the last usage read while it ran
}

// children tracks every child so that none outlives the harness, whatever
// path it exits by.
type children struct {
	mu  sync.Mutex
	all map[*child]bool
}

var procs = &children{all: map[*child]bool{}}

// start runs bin with args, logging to logDir/name.log. The child gets
// SIGKILL if the harness dies (Pdeathsig), so even a crash of the harness
// leaves nothing behind.
func (cs *children) start(name, bin string, args []string, logDir string) (*child, error) {
	logPath := filepath.Join(logDir, name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = lf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	cs.mu.Lock()
	cs.all[c] = true
	cs.mu.Unlock()
	go func() {
		c.waitErr = cmd.Wait()
		_ = lf.Close()
		cs.mu.Lock()
		delete(cs.all, c)
		cs.mu.Unlock()
		close(c.done)
	}()
	return c, nil
}

// killAll kills every child still running and waits for them.
func (cs *children) killAll() {
	cs.mu.Lock()
	var left []*child
	for c := range cs.all {
		left = append(left, c)
	}
	cs.mu.Unlock()
	for _, c := range left {
		_ = c.cmd.Process.Kill()
	}
	for _, c := range left {
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
		}
	}
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// exited reports whether the child has exited.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// usage reads the child's CPU and memory; after it exited it returns the
// figures from its rusage (peak RSS from ru_maxrss).
func (c *child) usage() usage {
	if !c.exited() {
		if u, err := readUsage(c.pid()); err == nil {
			c.last = u
			return u
		}
	}
	<-c.done
	u := c.last
	if st := c.cmd.ProcessState; st != nil {
		u.CPU = st.UserTime() + st.SystemTime()
		if ru, ok := st.SysUsage().(*syscall.Rusage); ok && ru.Maxrss*1024 > u.PeakRSS {
			u.PeakRSS = ru.Maxrss * 1024
		}
	}
	return u
}

// stop sends SIGTERM and waits up to grace for a graceful exit, then kills.
func (c *child) stop(grace time.Duration) error {
	if c.exited() {
		return c.exitErr()
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	return c.awaitExit(grace)
}

// awaitExit waits up to grace for the child, sent SIGTERM already, to exit,
// then kills it. It does not signal again: a service restores the
// default action of SIGTERM once its shutdown is done, and a second
// SIGTERM in the moment before it exits would kill it, which reads as a
// failed shutdown.
func (c *child) awaitExit(grace time.Duration) error {
	select {
	case <-c.done:
		return c.exitErr()
	case <-time.After(grace):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("%s did not stop within %s: killed", c.name, grace)
	}
}

func (c *child) exitErr() error {
	if c.waitErr != nil {
		return fmt.Errorf("%s: %w (log: %s)\n%s", c.name, c.waitErr, c.logPath, c.logTail(15))
	}
	return nil
}

// logTail returns the last n lines of the child's log.
func (c *child) logTail(n int) string {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}
