package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/kafkatest"
)

// Broker kinds, as reported in the results.
const (
	kindExternal = "external"
	kindReal     = "real"
	kindFake     = "kfake"
)

// broker is the Kafka the benchmark runs against.
type broker struct {
	kind    string
	version string
	addrs   []string
	pid     int // the JVM of a broker we started, for its CPU; 0 otherwise

	fake   *kfake.Cluster
	script string
	env    []string
}

// Describe is the broker for the report, such as "real Apache Kafka 4.4.0
// (deploy/kafka-local/kafka.sh) at 127.0.0.1:24117".
func (b *broker) Describe() string {
	switch b.kind {
	case kindReal:
		return fmt.Sprintf("real Apache Kafka %s (deploy/kafka-local/kafka.sh, KRaft, 1 node) at %s", b.version, strings.Join(b.addrs, ","))
	case kindExternal:
		return fmt.Sprintf("external Kafka %s at %s (FERRY_KAFKA_ADDRESS)", b.version, strings.Join(b.addrs, ","))
	default:
		return fmt.Sprintf("in-process kfake at %s (no java/mvn: NOT a real broker)", strings.Join(b.addrs, ","))
	}
}

// startBroker picks the broker: FERRY_KAFKA_ADDRESS, else a real Kafka via
// kafka.sh on free ports in dir, else in-process kfake.
func startBroker(ctx context.Context, root, dir string, logf func(string, ...any)) (*broker, error) {
	if env := os.Getenv("FERRY_KAFKA_ADDRESS"); env != "" {
		var addrs []string
		for _, a := range strings.Split(env, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
		b := &broker{kind: kindExternal, addrs: addrs}
		v, err := probeVersion(ctx, addrs)
		if err != nil {
			return nil, fmt.Errorf("FERRY_KAFKA_ADDRESS=%s: %w", env, err)
		}
		b.version = v
		return b, nil
	}
	_, errJava := exec.LookPath("java")
	_, errMvn := exec.LookPath("mvn")
	if errJava == nil && errMvn == nil {
		return startReal(ctx, root, dir, logf)
	}
	logf("no java/mvn on PATH: falling back to in-process kfake (numbers are NOT those of a real broker)")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	if err != nil {
		return nil, fmt.Errorf("start kfake: %w", err)
	}
	return &broker{kind: kindFake, addrs: c.ListenAddrs(), fake: c, version: "kfake"}, nil
}

var kafkaVersionRE = regexp.MustCompile(`Apache Kafka (\S+)`)

func startReal(ctx context.Context, root, dir string, logf func(string, ...any)) (*broker, error) {
	script := filepath.Join(root, "deploy", "kafka-local", "kafka.sh")
	for attempt := 1; ; attempt++ {
		ports, err := kafkatest.FreePorts(2)
		if err != nil {
			return nil, err
		}
		kdir := filepath.Join(dir, fmt.Sprintf("kafka-%d", attempt))
		b := &broker{
			kind:   kindReal,
			script: script,
			addrs:  []string{"127.0.0.1:" + strconv.Itoa(ports[0])},
			env: append(os.Environ(),
				"KAFKA_PORT="+strconv.Itoa(ports[0]),
				"KAFKA_CONTROLLER_PORT="+strconv.Itoa(ports[1]),
				"KAFKA_DIR="+kdir,
				// kafka.sh's watchdog stops the broker if we die without stopping it.
				"KAFKA_OWNER_PID="+strconv.Itoa(os.Getpid()),
			),
		}
		logf("starting Apache Kafka with %s on 127.0.0.1:%d", script, ports[0])
		sctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
		out, err := b.runScript(sctx, "start")
		cancel()
		if err != nil {
			b.stop()
			if attempt < 3 && strings.Contains(out, "already in use") {
				continue
			}
			return nil, fmt.Errorf("kafka.sh start: %w\n%s", err, out)
		}
		if m := kafkaVersionRE.FindStringSubmatch(out); m != nil {
			b.version = m[1]
		}
		if pid, err := os.ReadFile(filepath.Join(kdir, "kafka.pid")); err == nil {
			b.pid, _ = strconv.Atoi(strings.TrimSpace(string(pid)))
		}
		return b, nil
	}
}

// stop stops a broker we started; an external one is left alone.
func (b *broker) stop() {
	switch b.kind {
	case kindFake:
		b.fake.Close()
	case kindReal:
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if out, err := b.runScript(ctx, "stop"); err != nil {
			fmt.Fprintf(os.Stderr, "bench: kafka.sh stop: %v\n%s\n", err, out)
		}
	}
}

func (b *broker) runScript(ctx context.Context, sub string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", b.script, sub)
	cmd.Env = b.env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	return out.String(), err
}

// probeVersion asks the broker for its API versions and returns franz-go's
// guess of the Kafka version.
func probeVersion(ctx context.Context, addrs []string) (string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	vs, err := kadm.NewClient(cl).ApiVersions(ctx)
	if err != nil {
		return "", err
	}
	for _, v := range vs.Sorted() {
		if v.Err == nil {
			return v.VersionGuess(), nil
		}
	}
	return "", errors.New("no broker answered ApiVersions")
}

// freeAddr returns a free loopback host:port.
func freeAddr() (string, error) {
	p, err := kafkatest.FreePorts(1)
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(p[0]), nil
}
