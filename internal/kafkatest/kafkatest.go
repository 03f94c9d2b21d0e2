// Package kafkatest gives integration tests a Kafka broker and the few helpers
// every such test needs: unique topics, clients that are closed for you, end
// offsets and committed offsets without joining a group.
//
// A test package opts in with
//
//	func TestMain(m *testing.M) { kafkatest.Main(m) }
//
// and its tests call [Current] to get the broker. Main picks the broker once
// per test package, in this order:
//
//  1. FERRY_KAFKA_ADDRESS (comma-separated host:port list): an external
//     broker, such as one started by `make kafka-up`. Kafkatest never stops it.
//  2. java and mvn on PATH (and FERRY_KAFKA_FAKE unset): a real Apache Kafka
//     started with deploy/kafka-local/kafka.sh on free ports in a temporary
//     directory, stopped when the package's tests end. Failing to start it is
//     a failure, not a reason to fall back: a broken real broker must not
//     silently turn the integration tests into fake ones.
//  3. Otherwise an in-process kfake cluster. With CI=true kfake is a
//     failure, whether it is a fallback or FERRY_KAFKA_FAKE asked for it:
//     on kfake the broker-restart tests skip themselves, so a CI run on the
//     fake would pass without them.
//
// Main prints one line to stderr naming the broker it chose, such as
//
//	kafkatest: using real Apache Kafka 4.4.0 at 127.0.0.1:24117 (started in 3.1s)
//
// so a test log says what the tests ran against. Note that `go test ./pkg/...`
// (package list mode) shows a passing package's output only with -v; a
// failing package's output, and `go test` run inside the package directory,
// always show it.
//
// `go test ./...` runs test packages in parallel and each starts its own real
// broker on its own ports; the brokers use a small heap so that two fit on a
// 2-core machine next to the tests.
//
// [StartSecure] starts one more broker, of a test's own, with a SASL_SSL
// listener, for the tests of TLS and SASL (integration/security).
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
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Environment variables read by [Main].
const (
	// EnvAddress names an external broker (comma-separated host:port list).
	// It wins over everything else.
	EnvAddress = "FERRY_KAFKA_ADDRESS"
	// EnvFake, set to anything but "", "0" or "false", selects kfake even
	// when Java and Maven are installed: quick runs that need no real broker.
	EnvFake = "FERRY_KAFKA_FAKE"
)

// Broker kinds returned by [Broker.Kind].
const (
	KindExternal = "external" // from FERRY_KAFKA_ADDRESS; never stopped by kafkatest
	KindReal     = "real"     // Apache Kafka started by kafkatest via kafka.sh
	KindFake     = "kfake"    // in-process github.com/twmb/franz-go/pkg/kfake
)

// scriptPath is kafka.sh relative to the module root.
const scriptPath = "deploy/kafka-local/kafka.sh"

// opTimeout bounds every helper's round trips, so a dead broker fails a test
// with a message instead of hanging it until the go test timeout.
const opTimeout = 30 * time.Second

// current is the broker chosen by Main for this test binary.
var current atomic.Pointer[Broker]

// Broker is the Kafka a test package runs against. All methods are safe for
// concurrent use by parallel tests, except [Broker.Stop] and [Broker.Start],
// which affect every test of the package.
type Broker struct {
	kind    string
	addrs   []string
	version string // "4.4.0" for a real broker, "" if unknown
	fake    *kfake.Cluster

	// Real broker only: how to run kafka.sh for it, and its run directory.
	script string
	env    []string
	dir    string

	// adm serves the helpers (CreateTopic, EndOffsets, ...), so they do not
	// pay for a new client and connection on every call.
	adm *kadm.Client

	mu   sync.Mutex // serialises Stop/Start
	down bool       // stopped by Stop and not yet restarted

	closeOnce sync.Once
}

// Main starts the broker for the test package, runs its tests and stops the
// broker again. Call it from TestMain:
//
//	func TestMain(m *testing.M) { kafkatest.Main(m) }
//
// It does not return: it exits with the tests' status, or 1 if no broker
// could be had.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	b, err := choose()
	if err != nil {
		fmt.Fprintf(os.Stderr, "kafkatest: %v\n", err)
		return 1
	}
	current.Store(b)

	// Ctrl-C or a TERM from a CI runner must not leave a broker behind. (A
	// SIGKILL or the SIGQUIT of `go test -timeout` cannot be caught: kafka.sh's
	// watchdog stops the broker once this process is gone.)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			fmt.Fprintf(os.Stderr, "kafkatest: got %v, stopping the broker\n", s)
			b.close(false)
			os.Exit(1)
		case <-done:
		}
	}()

	code := m.Run()
	signal.Stop(sigs)
	close(done)
	b.close(code != 0)
	return code
}

// Current returns the broker that [Main] chose for this test package. It
// fails the test if the package's TestMain does not call Main.
func Current(t testing.TB) *Broker {
	t.Helper()
	b := current.Load()
	if b == nil {
		t.Fatal("kafkatest: no broker: this package needs func TestMain(m *testing.M) { kafkatest.Main(m) }")
	}
	return b
}

// Addrs returns the seed broker addresses (host:port).
func (b *Broker) Addrs() []string { return append([]string(nil), b.addrs...) }

// Kind returns "external", "real" or "kfake" (see the Kind constants), so a
// test can skip what its broker cannot do.
func (b *Broker) Kind() string { return b.kind }

// Version returns the Apache Kafka version of a real broker ("4.4.0") and ""
// for the other kinds.
func (b *Broker) Version() string { return b.version }

// Fake returns the kfake cluster, for fault injection (ControlKey and
// friends), or nil if the broker is not kfake. Tests that must inject faults
// whatever the package's broker is should use [NewFake] instead.
func (b *Broker) Fake() *kfake.Cluster { return b.fake }

// LogPath returns the server log of a real broker ("" for the other kinds):
// worth a look when a test against it fails.
func (b *Broker) LogPath() string {
	if b.kind != KindReal {
		return ""
	}
	return filepath.Join(b.dir, "logs", "server.log")
}

// Client returns a kgo client seeded with the broker's addresses, closed when
// the test ends. Its metadata minimum age is 100ms instead of kgo's 5s: tests
// create topics all the time, and with the default a client that fetched
// metadata a moment before waits up to 5s to learn of a new topic. opts are
// applied after these defaults, so they can override anything.
func (b *Broker) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return newClient(t, b.addrs, opts...)
}

// Admin returns a kadm client for the broker, closed when the test ends.
func (b *Broker) Admin(t testing.TB) *kadm.Client {
	t.Helper()
	return kadm.NewClient(b.Client(t))
}

// CreateTopic creates a topic with the given number of partitions (and
// replication factor 1), named after the test plus a random suffix so that
// parallel tests and reruns on a long-lived broker never share a topic. It
// returns once the broker's metadata shows every partition with a leader, so
// producing to it right away works. The topic is deleted when the test ends.
func (b *Broker) CreateTopic(t testing.TB, partitions int32) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	name := topicName(t.Name())
	if _, err := b.adm.CreateTopic(ctx, partitions, 1, nil, name); err != nil {
		t.Fatalf("kafkatest: create topic %q with %d partitions: %v", name, partitions, err)
	}
	t.Cleanup(func() { b.deleteTopic(t, name) })
	if err := waitTopic(ctx, b.adm, name, partitions); err != nil {
		t.Fatalf("kafkatest: topic %q: %v", name, err)
	}
	return name
}

// EndOffsets returns the end offset (the offset the next record will get) of
// every partition of topic. An unknown topic fails the test.
func (b *Broker) EndOffsets(t testing.TB, topic string) map[int32]int64 {
	t.Helper()
	var out map[int32]int64
	err := retry(func(ctx context.Context) error {
		listed, err := b.adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return err
		}
		if err := listed.Error(); err != nil {
			return err
		}
		ps, ok := listed[topic]
		if !ok || len(ps) == 0 {
			return fmt.Errorf("no partitions listed: %w", kerr.UnknownTopicOrPartition)
		}
		out = make(map[int32]int64, len(ps))
		for p, o := range ps {
			out[p] = o.Offset
		}
		return nil
	})
	if err != nil {
		t.Fatalf("kafkatest: end offsets of %q: %v", topic, err)
	}
	return out
}

// CommittedOffsets returns the offsets that group has committed for topic,
// by partition (Kafka convention: the next offset to consume). Partitions
// without a commit, and groups that do not exist, are simply absent from the
// map; it reads without joining the group, so it works while consumers run.
func (b *Broker) CommittedOffsets(t testing.TB, group, topic string) map[int32]int64 {
	t.Helper()
	var out map[int32]int64
	err := retry(func(ctx context.Context) error {
		resp, err := b.adm.FetchOffsets(ctx, group)
		out = make(map[int32]int64)
		if errors.Is(err, kerr.GroupIDNotFound) {
			return nil // never committed: an empty map, not an error
		}
		if err != nil {
			return err
		}
		for p, o := range resp[topic] {
			if o.Err != nil {
				return fmt.Errorf("partition %d: %w", p, o.Err)
			}
			if o.At >= 0 {
				out[p] = o.At
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("kafkatest: committed offsets of group %q, topic %q: %v", group, topic, err)
	}
	return out
}

// Stop stops the broker, keeping its data, for fault tests (consumer and
// producer behaviour while Kafka is down). Only a real broker started by
// kafkatest can do this: with kfake or an external broker the test is
// skipped. If the test does not call [Broker.Start] itself, the broker is
// restarted when the test ends, for the package's next tests. The whole
// package shares the broker, so a test that calls Stop must not call
// t.Parallel.
func (b *Broker) Stop(t testing.TB) {
	t.Helper()
	b.skipUnlessRestartable(t)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.down {
		t.Fatal("kafkatest: Stop: the broker is already stopped")
	}
	if out, err := b.runScript(context.Background(), "stop"); err != nil {
		t.Fatalf("kafkatest: stopping the broker: %v\n%s", err, out)
	}
	b.down = true
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if !b.down {
			return
		}
		if out, err := b.runScript(context.Background(), "start", "KAFKA_KEEP_DATA=1"); err != nil {
			t.Errorf("kafkatest: restarting the broker after the test: %v\n%s", err, out)
			return
		}
		b.down = false
	})
}

// Start restarts a broker stopped by [Broker.Stop] on the same ports and the
// same data (topics, records, committed offsets survive), and returns once
// it answers metadata requests. Clients made before Stop reconnect by
// themselves.
func (b *Broker) Start(t testing.TB) {
	t.Helper()
	b.skipUnlessRestartable(t)
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.down {
		t.Fatal("kafkatest: Start: the broker is not stopped (call Stop first)")
	}
	if out, err := b.runScript(context.Background(), "start", "KAFKA_KEEP_DATA=1"); err != nil {
		t.Fatalf("kafkatest: restarting the broker: %v\n%s", err, out)
	}
	b.down = false
}

func (b *Broker) skipUnlessRestartable(t testing.TB) {
	t.Helper()
	switch b.kind {
	case KindExternal:
		t.Skip("kafkatest: cannot stop or restart an external broker (" + EnvAddress + "); this test needs the real broker kafkatest starts itself")
	case KindFake:
		t.Skip("kafkatest: kfake cannot be stopped and restarted with its data; this test needs a real broker (install Java 17+ and Maven)")
	}
}

// NewFake starts a private in-process kfake cluster (one broker, unless opts
// say otherwise) with one topic of the given number of partitions, named
// after the test. It is for unit tests that inject faults with ControlKey,
// KeepControl, SleepControl and the like, which a real broker cannot do and
// which must not disturb the package's shared broker. The cluster is closed
// when the test ends.
func NewFake(t testing.TB, partitions int32, opts ...kfake.Opt) (*kfake.Cluster, string) {
	t.Helper()
	topic := topicName(t.Name())
	all := append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic)}, opts...)
	c, err := kfake.NewCluster(all...)
	if err != nil {
		t.Fatalf("kafkatest: starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c, topic
}

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
	// Ports are free when picked but not reserved; if another test package
	// grabs one before the broker binds it, pick again.
	for attempt := 1; ; attempt++ {
		ports, err := FreePorts(2)
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		b := &Broker{
			kind:   KindReal,
			script: script,
			dir:    dir,
			env: append(os.Environ(),
				"KAFKA_PORT="+strconv.Itoa(ports[0]),
				"KAFKA_CONTROLLER_PORT="+strconv.Itoa(ports[1]),
				"KAFKA_DIR="+dir,
				"KAFKA_OWNER_PID="+strconv.Itoa(os.Getpid()),
			),
		}
		// Generous: a cold ~/.m2 downloads the jars first. kafka.sh itself
		// bounds the wait for the broker to 90s.
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		out, err := b.runScript(ctx, "start")
		cancel()
		if err != nil {
			_, _ = b.runScript(context.Background(), "stop") // best effort: leave nothing behind
			if attempt < 3 && (strings.Contains(out, "already in use") || strings.Contains(out, "Address already in use")) {
				continue
			}
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("java and mvn are on PATH but the real Kafka broker did not start "+
				"(set %s=1 to use kfake instead):\n%s", EnvFake, indent(out))
		}
		if m := versionRE.FindStringSubmatch(out); m != nil {
			b.version = m[1]
		}
		b.addrs = []string{"127.0.0.1:" + strconv.Itoa(ports[0])}
		nb, err := newBroker(KindReal, b.addrs)
		if err != nil {
			_, _ = b.runScript(context.Background(), "stop") // best effort
			_ = os.RemoveAll(dir)
			return nil, err
		}
		b.adm = nb.adm
		fmt.Fprintf(os.Stderr, "kafkatest: using real Apache Kafka %s at %s (started in %.1fs)\n",
			b.version, b.addrs[0], time.Since(start).Seconds())
		return b, nil
	}
}

// newBroker returns a broker of the given kind with its shared admin client.
func newBroker(kind string, addrs []string) (*Broker, error) {
	cl, err := kgo.NewClient(clientDefaults(addrs)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client for %v: %w", addrs, err)
	}
	return &Broker{kind: kind, addrs: addrs, adm: kadm.NewClient(cl)}, nil
}

// close releases the broker at the end of the package's tests. A real
// broker's logs are kept when tests failed, since they may explain why.
func (b *Broker) close(failed bool) {
	b.closeOnce.Do(func() {
		if b.adm != nil {
			b.adm.Close()
		}
		switch b.kind {
		case KindFake:
			b.fake.Close()
		case KindReal:
			if out, err := b.runScript(context.Background(), "stop"); err != nil {
				fmt.Fprintf(os.Stderr, "kafkatest: stopping the broker: %v\n%s", err, indent(out))
			}
			if failed {
				_ = os.RemoveAll(filepath.Join(b.dir, "data"))
				fmt.Fprintf(os.Stderr, "kafkatest: tests failed; broker log kept in %s\n", b.LogPath())
				return
			}
			_ = os.RemoveAll(b.dir)
		}
	})
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

// clientDefaults are the options of every client kafkatest makes; see
// [Broker.Client] for why.
func clientDefaults(addrs []string) []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(addrs...), kgo.MetadataMinAge(100 * time.Millisecond)}
}

// newClient returns a kgo client seeded with addrs and closed on cleanup.
func newClient(t testing.TB, addrs []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(clientDefaults(addrs), opts...)...)
	if err != nil {
		t.Fatalf("kafkatest: new client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// waitTopic polls metadata until topic has the given number of partitions,
// each with a leader. CreateTopics returns when the controller has accepted
// the topic, which is before the broker serves it.
func waitTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int32) error {
	var last error
	for {
		md, err := adm.Metadata(ctx, topic)
		switch {
		case err != nil:
			last = err
		default:
			last = topicReady(md.Topics[topic], partitions)
		}
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready before the deadline: %w", last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func topicReady(td kadm.TopicDetail, partitions int32) error {
	if td.Err != nil {
		return td.Err
	}
	if len(td.Partitions) != int(partitions) {
		return fmt.Errorf("metadata shows %d of %d partitions", len(td.Partitions), partitions)
	}
	for p, pd := range td.Partitions {
		if pd.Err != nil {
			return fmt.Errorf("partition %d: %w", p, pd.Err)
		}
		if pd.Leader < 0 {
			return fmt.Errorf("partition %d has no leader yet", p)
		}
	}
	return nil
}

func (b *Broker) deleteTopic(t testing.TB, topic string) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if _, err := b.adm.DeleteTopic(ctx, topic); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
		// Not a test failure: the broker is throw-away and names are unique.
		t.Logf("kafkatest: deleting topic %q: %v", topic, err)
	}
}

// retry calls fn until it succeeds, fails with a non-retriable Kafka error,
// or opTimeout passes. Right after a topic is created or the broker
// restarts, Kafka answers for a moment with retriable errors (leader not
// available, coordinator loading), which a test helper should wait out. An
// unknown topic is retriable too, but is most likely a wrong name: it gets
// a few seconds only.
func retry(fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	unknownUntil := time.Now().Add(5 * time.Second)
	for {
		err := fn(ctx)
		if err == nil || !kerr.IsRetriable(err) && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		if errors.Is(err, kerr.UnknownTopicOrPartition) && time.Now().After(unknownUntil) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// topicName makes a valid, unique Kafka topic name from a test name:
// characters Kafka rejects (and '.', which Kafka warns collides with '_' in
// metric names) become '-', and a random suffix keeps reruns and parallel
// tests apart.
func topicName(testName string) string {
	const maxBase = 200 // Kafka allows 249 characters
	var sb strings.Builder
	for _, r := range testName {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			sb.WriteRune(r)
		default:
			sb.WriteByte('-')
		}
		if sb.Len() >= maxBase {
			break
		}
	}
	base := sb.String()
	if base == "" {
		base = "test"
	}
	return fmt.Sprintf("%s-%08x", base, rand.Uint32())
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "  (no output)"
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
