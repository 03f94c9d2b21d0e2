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
//
// [StartCluster] starts a test's own three-broker KRaft cluster (replication
// factor 3, min.insync.replicas=2) from the same jars, whose nodes a test
// can SIGKILL, stop and start again, for the tests of broker loss (chaos).
package kafkatest

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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

	// replicas is the replication factor of CreateTopic's topics; 0 means 1.
	replicas int16

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

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "  (no output)"
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
