package kafkatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// This file holds how Main chooses and starts its broker.

// choose picks and starts the broker for Main; see the package doc.
func choose() (*Broker, error) {
	var missing []string
	if _, err := exec.LookPath("java"); err != nil {
		missing = append(missing, "Java")
	}
	if _, err := exec.LookPath("mvn"); err != nil {
		missing = append(missing, "Maven")
	}
	c, err := decide(environment{
		address:  os.Getenv(EnvAddress),
		wantFake: envTrue(os.Getenv(EnvFake)),
		ci:       os.Getenv("CI") == "true",
		missing:  missing,
	})
	if err != nil {
		return nil, err
	}
	switch c.kind {
	case KindExternal:
		return external(os.Getenv(EnvAddress))
	case KindReal:
		return startReal()
	}
	b, err := startFake()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "kafkatest: %s, using in-process kfake (not a real broker)\n", c.why)
	return b, nil
}

// environment is what decide looks at: the variables and tools that pick
// the broker.
type environment struct {
	address  string   // FERRY_KAFKA_ADDRESS
	wantFake bool     // FERRY_KAFKA_FAKE
	ci       bool     // CI=true
	missing  []string // what a real broker needs and PATH lacks (Java, Maven)
}

// choice is the kind of broker decide picked, and why when it is kfake.
type choice struct {
	kind string
	why  string
}

// decide picks the kind of broker from the environment; see the package
// doc. It is pure so that its table is tested whole. Under CI=true it
// never picks kfake, not even when FERRY_KAFKA_FAKE asks for it: on kfake
// the broker-restart tests skip themselves, and a CI run that skips them
// silently would pass without testing what they guard.
func decide(e environment) (choice, error) {
	if e.address != "" {
		return choice{kind: KindExternal}, nil
	}
	if !e.wantFake && len(e.missing) == 0 {
		return choice{kind: KindReal}, nil
	}
	why := EnvFake + " is set"
	if !e.wantFake {
		why = "no " + strings.Join(e.missing, "/") + " on PATH"
	}
	if e.ci {
		return choice{}, fmt.Errorf("CI=true and %s: refusing to use kfake, whose runs skip the broker-restart tests; "+
			"CI must test against real Kafka (unset %s, install Java 17+ and Maven, or set %s)", why, EnvFake, EnvAddress)
	}
	return choice{kind: KindFake, why: why}, nil
}

// envTrue reads a boolean-ish environment value: unset, "0" and "false"
// are false, anything else is true.
func envTrue(v string) bool {
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	return err != nil || b
}

func external(env string) (*Broker, error) {
	var addrs []string
	for _, a := range strings.Split(env, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%s=%q names no broker", EnvAddress, env)
	}
	b, err := newBroker(KindExternal, addrs)
	if err != nil {
		return nil, err
	}
	// Fail here, once, rather than in every test if the address is wrong.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	vs, err := b.adm.ApiVersions(ctx)
	guess := ""
	if err == nil {
		for _, v := range vs.Sorted() {
			if err = v.Err; err == nil {
				guess = v.VersionGuess()
				break
			}
		}
	}
	if err != nil {
		b.adm.Close()
		return nil, fmt.Errorf("%s=%s: broker not reachable: %w", EnvAddress, env, err)
	}
	fmt.Fprintf(os.Stderr, "kafkatest: using external Kafka at %s (%s, %s)\n",
		strings.Join(addrs, ","), EnvAddress, guess)
	return b, nil
}

func startFake() (*Broker, error) {
	// One broker and one default partition, like deploy/kafka-local, and no
	// auto-created topics: tests create theirs with CreateTopic.
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	if err != nil {
		return nil, fmt.Errorf("starting kfake: %w", err)
	}
	b, err := newBroker(KindFake, c.ListenAddrs())
	if err != nil {
		c.Close()
		return nil, err
	}
	b.fake = c
	return b, nil
}

var versionRE = regexp.MustCompile(`Apache Kafka (\S+)`)

func startReal() (*Broker, error) {
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	script := filepath.Join(root, scriptPath)
	if _, err := os.Stat(script); err != nil {
		return nil, fmt.Errorf("real broker: %w", err)
	}
	dir, err := os.MkdirTemp("", "ferry-kafka-")
	if err != nil {
		return nil, err
	}
	start := time.Now()
	b, _, err := launch(script, 2, func(int, []int) (string, []string, error) { return dir, nil, nil })
	if err != nil {
		_ = os.RemoveAll(dir)
		var se *scriptError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("java and mvn are on PATH but the real Kafka broker did not start "+
				"(set %s=1 to use kfake instead):\n%s", EnvFake, indent(se.out))
		}
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "kafkatest: using real Apache Kafka %s at %s (started in %.1fs)\n",
		b.version, b.addrs[0], time.Since(start).Seconds())
	return b, nil
}

// scriptError is kafka.sh's failure to start a broker, with its output.
type scriptError struct{ out string }

func (e *scriptError) Error() string { return "kafka.sh start failed:\n" + indent(e.out) }

// launch starts kafka.sh as a broker on nports fresh loopback ports (the
// first is the client port, the second the controller's) and connects its
// admin client. Ports are free when picked but not reserved: when another
// test package takes one before the broker binds it, launch picks again,
// three attempts in all. setup gives an attempt its run directory and the
// script variables beyond the ports, directory and owner; it may write the
// files they name. A failure of the script itself is a *scriptError.
func launch(script string, nports int, setup func(attempt int, ports []int) (dir string, env []string, err error)) (*Broker, []int, error) {
	for attempt := 1; ; attempt++ {
		ports, err := FreePorts(nports)
		if err != nil {
			return nil, nil, err
		}
		dir, extra, err := setup(attempt, ports)
		if err != nil {
			return nil, nil, err
		}
		b := &Broker{
			kind:   KindReal,
			script: script,
			dir:    dir,
			env: append(append(os.Environ(),
				"KAFKA_PORT="+strconv.Itoa(ports[0]),
				"KAFKA_CONTROLLER_PORT="+strconv.Itoa(ports[1]),
				"KAFKA_DIR="+dir,
				"KAFKA_OWNER_PID="+strconv.Itoa(os.Getpid()),
			), extra...),
		}
		// Generous: a cold ~/.m2 downloads the jars first. kafka.sh itself
		// bounds the wait for the broker to 90s.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		out, err := b.runScript(ctx, "start")
		cancel()
		if err != nil {
			_, _ = b.runScript(context.Background(), "stop") // best effort: leave nothing behind
			if attempt < 3 && strings.Contains(out, "already in use") {
				continue
			}
			return nil, nil, &scriptError{out: out}
		}
		if m := versionRE.FindStringSubmatch(out); m != nil {
			b.version = m[1]
		}
		b.addrs = []string{"127.0.0.1:" + strconv.Itoa(ports[0])}
		nb, err := newBroker(KindReal, b.addrs)
		if err != nil {
			_, _ = b.runScript(context.Background(), "stop") // best effort
			return nil, nil, err
		}
		b.adm = nb.adm
		return b, ports, nil
	}
}

// runScript runs kafka.sh with the broker's environment plus extra
// variables and returns its combined output.
func (b *Broker) runScript(ctx context.Context, sub string, extraEnv ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", b.script, sub)
	cmd.Env = append(append([]string(nil), b.env...), extraEnv...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	// kafka.sh's background processes do not hold our pipes, but if one ever
	// did, Wait must not block on it forever.
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	return out.String(), err
}

// ModuleRoot walks up from the working directory (the package directory
// under go test) to the directory holding go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory: cannot find " + scriptPath)
		}
		dir = parent
	}
}

// FreePorts returns n distinct TCP ports free on 127.0.0.1. They are drawn
// below the kernel's ephemeral range when possible: a client that keeps
// dialling a stopped broker's ephemeral port can, rarely, connect to itself
// (TCP simultaneous open) and so occupy the port the broker restarts on.
func FreePorts(n int) ([]int, error) {
	lo, hi := 20000, ephemeralStart()
	var ports []int
	seen := map[int]bool{}
	for tries := 0; len(ports) < n && tries < 200; tries++ {
		p := 0 // let the kernel choose if the range below the ephemeral one is too small
		if hi-lo > 1000 {
			p = lo + rand.IntN(hi-lo)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		p = ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		if !seen[p] {
			seen[p] = true
			ports = append(ports, p)
		}
	}
	if len(ports) < n {
		return nil, errors.New("no free TCP ports on 127.0.0.1")
	}
	return ports, nil
}

// ephemeralStart returns the first port of the kernel's ephemeral range
// (32768 if it cannot be read).
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	p, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return p
}
