package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ClusterSize is the number of brokers of a [Cluster].
const ClusterSize = 3

// clusterHeap is each cluster node's JVM heap. Three nodes share a 2-core
// machine with the tests (and the package's own single broker): 384 MiB
// holds a test's few topics with room to spare, and the nodes together stay
// under 1.5 GiB of resident memory.
const clusterHeap = "-Xms64m -Xmx384m"

// clusterStartTimeout bounds how long kafka.sh waits for one node to answer.
// A node answers only once a majority of the controllers runs, and three
// JVMs starting at once on two busy cores take far longer than one.
const clusterStartTimeout = 180

// Cluster is three real Apache Kafka brokers in KRaft combined mode (each
// node is broker and controller, the three are the controller quorum),
// started by a test of its own with [StartCluster]. Topics made by its
// CreateTopic have three replicas and every write needs two of them
// (min.insync.replicas=2), as in production. Its embedded Broker is seeded
// with every node, so its helpers (CreateTopic, EndOffsets,
// CommittedOffsets, Client, Admin) keep working while any one node is down.
//
// Nodes are numbered 1 to ClusterSize (their KRaft node.id). Kill, Stop and
// Start affect one node and must not be called concurrently for the same node.
type Cluster struct {
	*Broker
	nodes []*clusterNode
	// raw sends the metadata requests that must reach a broker: kadm's
	// broker list comes from the client's cache.
	raw *kgo.Client
}

// clusterNode is one node: its kafka.sh environment and run directory.
type clusterNode struct {
	id   int32
	run  *Broker // script, env and dir for runScript; its adm is unused
	addr string

	mu   sync.Mutex
	down bool
}

// StartCluster starts a three-node cluster on free loopback ports from the
// same jars as the single broker (deploy/kafka-local/kafka.sh, one run
// directory per node) and returns once every node is an unfenced broker.
// It is stopped when the test ends; its logs are kept if the test failed.
// It needs Java and Maven: without them the test is skipped, or fails with
// CI=true. FERRY_KAFKA_FAKE skips it too, except with CI=true: kfake has no
// replication to lose.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	ci := envTrue(os.Getenv("CI"))
	if envTrue(os.Getenv(EnvFake)) && !ci {
		t.Skipf("kafkatest: %s asks for no real broker, and a cluster needs three", EnvFake)
	}
	if err := realBrokerTools(); err != nil {
		if ci {
			t.Fatalf("kafkatest: a three-broker cluster needs a real Kafka: %v", err)
		}
		t.Skipf("kafkatest: no three-broker cluster: %v", err)
	}
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, scriptPath)
	// Not t.TempDir: the logs must outlive a failed test to be read.
	base, err := os.MkdirTemp("", "ferry-kafka-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var c *Cluster
	for attempt := 1; ; attempt++ {
		c, err = launchCluster(script, filepath.Join(base, "try"+strconv.Itoa(attempt)))
		if err == nil {
			break
		}
		// A port picked free may be taken by another test package before
		// the node binds it: pick all of them again.
		if attempt == 3 || !strings.Contains(err.Error(), "already in use") {
			fmt.Fprintf(os.Stderr, "kafkatest: cluster logs kept in %s\n", base)
			t.Fatalf("kafkatest: the three-broker cluster did not start: %v", err)
		}
	}
	t.Cleanup(func() {
		c.stopAll()
		c.close()
		if t.Failed() {
			t.Logf("kafkatest: the cluster's logs are kept in %s", base)
			return
		}
		_ = os.RemoveAll(base)
	})
	t.Logf("kafkatest: three-broker cluster (Apache Kafka %s) at %s, started in %.1fs",
		c.version, strings.Join(c.addrs, ","), time.Since(start).Seconds())
	return c
}

// launchCluster formats and starts the three nodes in dir, all at once: a
// node answers only once a majority of the quorum is up.
func launchCluster(script, dir string) (*Cluster, error) {
	ports, err := FreePorts(2 * ClusterSize)
	if err != nil {
		return nil, err
	}
	clusterID := randomUUID()
	var voters, bootstrap []string
	for i := range ClusterSize {
		cport := ports[2*i+1]
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d:%s", i+1, cport, randomUUID()))
		bootstrap = append(bootstrap, "127.0.0.1:"+strconv.Itoa(cport))
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	c := &Cluster{}
	var addrs []string
	for i := range ClusterSize {
		id := int32(i + 1)
		port, cport := ports[2*i], ports[2*i+1]
		extra := filepath.Join(dir, fmt.Sprintf("node-%d.properties", id))
		if err := os.WriteFile(extra, []byte(nodeProperties(id, strings.Join(bootstrap, ","))), 0o600); err != nil {
			return nil, err
		}
		n := &clusterNode{id: id, addr: "127.0.0.1:" + strconv.Itoa(port), run: &Broker{
			kind:   KindReal,
			script: script,
			dir:    filepath.Join(dir, fmt.Sprintf("node-%d", id)),
			env: append(os.Environ(),
				"KAFKA_PORT="+strconv.Itoa(port),
				"KAFKA_CONTROLLER_PORT="+strconv.Itoa(cport),
				"KAFKA_DIR="+filepath.Join(dir, fmt.Sprintf("node-%d", id)),
				"KAFKA_OWNER_PID="+strconv.Itoa(os.Getpid()),
				"KAFKA_EXTRA_CONFIG="+extra,
				"KAFKA_CLUSTER_ID="+clusterID,
				"KAFKA_INITIAL_CONTROLLERS="+strings.Join(voters, ","),
				"KAFKA_HEAP_OPTS="+clusterHeap,
				"KAFKA_START_TIMEOUT="+strconv.Itoa(clusterStartTimeout),
			),
		}}
		c.nodes = append(c.nodes, n)
		addrs = append(addrs, n.addr)
	}
	outs := make([]string, ClusterSize)
	errs := make([]error, ClusterSize)
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			defer cancel()
			outs[i], errs[i] = n.run.runScript(ctx, "start")
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.stopAll()
		var msg []string
		for i, out := range outs {
			if errs[i] != nil {
				msg = append(msg, fmt.Sprintf("node %d: %v\n%s", i+1, errs[i], indent(out)))
			}
		}
		return nil, errors.New(strings.Join(msg, "\n"))
	}
	b, err := newBroker(KindReal, addrs)
	if err != nil {
		c.stopAll()
		return nil, err
	}
	b.dir, b.replicas = dir, ClusterSize
	if m := versionRE.FindStringSubmatch(outs[0]); m != nil {
		b.version = m[1]
	}
	c.Broker = b
	if c.raw, err = kgo.NewClient(clientDefaults(addrs)...); err != nil {
		c.stopAll()
		b.adm.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.waitBrokers(ctx, c.NodeIDs()...); err != nil {
		c.stopAll()
		c.close()
		return nil, err
	}
	return c, nil
}

// nodeProperties are the settings kafka.sh appends to its single-broker
// template for node id (a later key wins).
func nodeProperties(id int32, bootstrap string) string {
	return strings.Join([]string{
		"",
		"# --- kafkatest's three-broker cluster: node " + strconv.Itoa(int(id)),
		"node.id=" + strconv.Itoa(int(id)),
		"controller.quorum.bootstrap.servers=" + bootstrap,
		"# Replicated as in production: a write needs two of the three replicas.",
		"default.replication.factor=3",
		"min.insync.replicas=2",
		"unclean.leader.election.enable=false",
		"offsets.topic.replication.factor=3",
		"transaction.state.log.replication.factor=3",
		"transaction.state.log.min.isr=2",
		"share.coordinator.state.topic.replication.factor=3",
		"share.coordinator.state.topic.min.isr=2",
		"# A SIGKILLed node is fenced, and its partitions get new leaders, after",
		"# 6 s without a heartbeat instead of 9 s: shorter outages, same path.",
		"broker.heartbeat.interval.ms=1000",
		"broker.session.timeout.ms=6000",
		"",
	}, "\n")
}

// NodeIDs returns the node IDs, 1 to ClusterSize.
func (c *Cluster) NodeIDs() []int32 {
	ids := make([]int32, len(c.nodes))
	for i, n := range c.nodes {
		ids[i] = n.id
	}
	return ids
}

// NodeAddr returns the client address (host:port) of node id.
func (c *Cluster) NodeAddr(t testing.TB, id int32) string {
	t.Helper()
	return c.node(t, id).addr
}

// NodeLog returns the server log of node id: worth a look when a test fails.
func (c *Cluster) NodeLog(t testing.TB, id int32) string {
	t.Helper()
	return filepath.Join(c.node(t, id).run.dir, "logs", "server.log")
}

func (c *Cluster) node(t testing.TB, id int32) *clusterNode {
	t.Helper()
	for _, n := range c.nodes {
		if n.id == id {
			return n
		}
	}
	t.Fatalf("kafkatest: the cluster has no node %d", id)
	return nil
}

// Kill ends node id with SIGKILL, as a crash or a lost machine would: no
// controlled shutdown, no flush. It returns once the process is gone.
func (c *Cluster) Kill(t testing.TB, id int32) {
	t.Helper()
	n := c.node(t, id)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down {
		t.Fatalf("kafkatest: Kill: node %d is already down", id)
	}
	pid, err := n.pid()
	if err != nil {
		t.Fatalf("kafkatest: Kill: node %d: %v", id, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kafkatest: Kill: node %d (pid %d): %v", id, pid, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("kafkatest: node %d (pid %d) still running 10s after SIGKILL", id, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.down = true
}

// Stop stops node id gracefully (SIGTERM: a controlled shutdown, which
// moves its leaderships to the other nodes first) and returns once it is gone.
func (c *Cluster) Stop(t testing.TB, id int32) {
	t.Helper()
	n := c.node(t, id)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.down {
		t.Fatalf("kafkatest: Stop: node %d is already down", id)
	}
	if out, err := n.run.runScript(context.Background(), "stop"); err != nil {
		t.Fatalf("kafkatest: stopping node %d: %v\n%s", id, err, indent(out))
	}
	n.down = true
}

// Start restarts the given nodes, killed or stopped before, on their ports
// and their data, all at once (a JVM takes a while to start on a busy
// machine), and returns once the cluster lists each as a broker again (it
// caught up with the metadata and is unfenced). Their replicas may still be
// catching up: [Cluster.WaitInSync] waits for that.
func (c *Cluster) Start(t testing.TB, ids ...int32) {
	t.Helper()
	nodes := make([]*clusterNode, len(ids))
	for i, id := range ids {
		nodes[i] = c.node(t, id)
		nodes[i].mu.Lock()
		defer nodes[i].mu.Unlock()
		if !nodes[i].down {
			t.Fatalf("kafkatest: Start: node %d is running (Kill or Stop it first)", id)
		}
	}
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := n.run.runScript(context.Background(), "start", "KAFKA_KEEP_DATA=1"); err != nil {
				errs[i] = fmt.Errorf("restarting node %d: %w\n%s", n.id, err, indent(out))
				return
			}
			n.down = false
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.waitBrokers(ctx, ids...); err != nil {
		t.Fatalf("kafkatest: nodes %v restarted: %v", ids, err)
	}
}

// waitBrokers waits until the cluster's metadata lists every node of ids
// as a broker. A fenced broker (not caught up, or not yet heartbeating) is
// not listed.
func (c *Cluster) waitBrokers(ctx context.Context, ids ...int32) error {
	var missing []int32
	for {
		req := kmsg.NewPtrMetadataRequest()
		req.Topics = []kmsg.MetadataRequestTopic{}
		resp, err := req.RequestWith(ctx, c.raw)
		if err == nil {
			missing = missing[:0]
			for _, id := range ids {
				if !slices.ContainsFunc(resp.Brokers, func(b kmsg.MetadataResponseBroker) bool { return b.NodeID == id }) {
					missing = append(missing, id)
				}
			}
			if len(missing) == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("cluster metadata: %w", err)
			}
			return fmt.Errorf("nodes %v not listed as brokers", missing)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// close closes the cluster's clients.
func (c *Cluster) close() {
	c.adm.Close()
	c.raw.Close()
}

// stopAll stops every node that runs, at once (best effort, at the end).
func (c *Cluster) stopAll() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := n.run.runScript(context.Background(), "stop"); err != nil {
				fmt.Fprintf(os.Stderr, "kafkatest: stopping node %d: %v\n%s", n.id, err, indent(out))
			}
		}()
	}
	wg.Wait()
}

// pid returns the node's JVM process ID from kafka.sh's pid file, checking
// that the process is this node's broker.
func (n *clusterNode) pid() (int, error) {
	b, err := os.ReadFile(filepath.Join(n.run.dir, "kafka.pid"))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("pid file: %w", err)
	}
	cmd, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || !strings.Contains(string(cmd), filepath.Join(n.run.dir, "server.properties")) {
		return 0, fmt.Errorf("pid %d is not the node's broker", pid)
	}
	return pid, nil
}

// processAlive reports whether pid runs (a zombie does not).
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// randomUUID returns a random Kafka UUID (16 bytes, URL-safe base64 without
// padding) for a cluster or directory ID. One that would start with '-' is
// drawn again, as Kafka does, so no tool reads it as an option.
func randomUUID() string {
	for {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		s := base64.RawURLEncoding.EncodeToString(b)
		if s[0] != '-' {
			return s
		}
	}
}
