package deploytest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/poll"
)

// TestFerryRunsInContainersAsTheImageUser runs the Ferry part of the stack
// in podman containers against a real Kafka: a pusher writing a fresh
// named volume on /data as the image's user, two consumers and the load
// generator. No registry image can be pulled here, so the image is FROM
// scratch with the static binaries and the same user and /data preparation
// as deploy/compose/Dockerfile's final stage.
//
// Opt-in: FERRY_PODMAN=1 and FERRY_KAFKA_ADDRESS. FERRY_PODMAN_GLOBAL_ARGS
// and FERRY_PODMAN_RUN_ARGS add podman flags the host needs (on the Ferry
// development machines: "--runtime runc" and "--ulimit nofile=1024:1024
// --ulimit nproc=1024:1024", since crun refuses their hybrid cgroups).
func TestFerryRunsInContainersAsTheImageUser(t *testing.T) {
	if os.Getenv("FERRY_PODMAN") != "1" || os.Getenv("FERRY_KAFKA_ADDRESS") == "" {
		t.Skip("opt-in: set FERRY_PODMAN=1 and FERRY_KAFKA_ADDRESS to run Ferry in podman containers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	df := parseDockerfile(t)
	image := fmt.Sprintf("localhost/ferry-deploytest:%d", os.Getpid())
	buildScratchImage(ctx, t, df, image)

	kafka := os.Getenv("FERRY_KAFKA_ADDRESS")
	topic := fmt.Sprintf("deploytest-podman-%d", time.Now().UnixNano())
	createTopic(ctx, t, kafka, topic, 2)
	ports, err := kafkatest.FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	volume := strings.ReplaceAll(strings.TrimPrefix(image, "localhost/"), ":", "-")
	t.Cleanup(func() { _ = exec.Command("podman", podmanArgs("volume", "rm", "-f", volume)...).Run() })
	pusherHTTP := fmt.Sprintf("127.0.0.1:%d", ports[1])
	run(ctx, t, image, []string{"-v", volume + ":/data"}, "ferry-pusher", "-storage.path=/data/tsdb",
		fmt.Sprintf("-grpc.listen-address=127.0.0.1:%d", ports[0]), "-http.listen-address="+pusherHTTP)
	for i := range 2 {
		run(ctx, t, image, nil, "ferry-consumer", "-kafka.address="+kafka, "-kafka.topic="+topic, "-kafka.consumer-group="+topic,
			fmt.Sprintf("-instance-id=consumer-%d", i), fmt.Sprintf("-pusher.address=127.0.0.1:%d", ports[0]),
			fmt.Sprintf("-http.listen-address=127.0.0.1:%d", ports[2+i]))
	}
	run(ctx, t, image, nil, "ferry-loadgen", "-kafka.address="+kafka, "-kafka.topic="+topic, "-tenants=4", "-rate=100", "-duration=30s")

	query := "http://" + pusherHTTP + "/api/v1/query?query=" + url.QueryEscape("count(ferry_demo_value)")
	poll.Until(t, 2*time.Minute, 500*time.Millisecond, "tenant-0's demo series in the pusher's TSDB", func() bool {
		body := get(ctx, query, "tenant-0")
		return strings.Contains(body, `"result":[{`)
	})
	poll.Until(t, time.Minute, 500*time.Millisecond, "a committed offset on both partitions", func() bool {
		adm := kadm.NewClient(newClient(t, kafka))
		defer adm.Close()
		offsets, err := adm.FetchOffsets(ctx, topic)
		if err != nil {
			return false
		}
		var committed int
		offsets.Each(func(o kadm.OffsetResponse) {
			if o.Err == nil && o.At > 0 {
				committed++
			}
		})
		return committed == 2
	})
}

// podmanArgs prefixes args with FERRY_PODMAN_GLOBAL_ARGS.
func podmanArgs(args ...string) []string {
	return append(strings.Fields(os.Getenv("FERRY_PODMAN_GLOBAL_ARGS")), args...)
}

func podman(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(ctx, "podman", podmanArgs(args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("podman %q: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// buildScratchImage builds the static binaries and an image with the
// Dockerfile's runtime user and its /data owned by that user.
func buildScratchImage(ctx context.Context, t *testing.T, df dockerfile, image string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", dir+"/", "./services/ferry-pusher", "./services/ferry-consumer", "./services/ferry-loadgen")
	build.Dir = repoRoot(t)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var owned strings.Builder
	for _, d := range df.owned {
		fmt.Fprintf(&owned, "COPY --chown=%d:%d data %s\n", df.uid, df.gid, d)
	}
	containerfile := fmt.Sprintf("FROM scratch\nCOPY ferry-pusher ferry-consumer ferry-loadgen /usr/local/bin/\n%sUSER %d:%d\n", owned.String(), df.uid, df.gid)
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(containerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	podman(ctx, t, "build", "-q", "-t", image, "-f", filepath.Join(dir, "Containerfile"), dir)
	t.Cleanup(func() { _ = exec.Command("podman", podmanArgs("rmi", "-f", image)...).Run() })
}

// run starts a detached container on the host network, removed (by its
// ID) when the test ends; its log is printed if the test failed.
func run(ctx context.Context, t *testing.T, image string, extra []string, cmd ...string) {
	t.Helper()
	args := append([]string{"run", "-d", "--network", "host"}, strings.Fields(os.Getenv("FERRY_PODMAN_RUN_ARGS"))...)
	args = append(append(args, extra...), image)
	id := podman(ctx, t, append(args, cmd...)...)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("podman", podmanArgs("logs", id)...).CombinedOutput()
			t.Logf("%s:\n%s", cmd[0], out)
		}
		_ = exec.Command("podman", podmanArgs("rm", "-f", id)...).Run()
	})
}

func get(ctx context.Context, u, tenant string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return ""
	}
	req.Header.Set("X-Scope-OrgID", tenant)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func newClient(t *testing.T, addr string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(addr, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func createTopic(ctx context.Context, t *testing.T, addr, topic string, partitions int32) {
	t.Helper()
	adm := kadm.NewClient(newClient(t, addr))
	defer adm.Close()
	if _, err := adm.CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	t.Cleanup(func() {
		adm := kadm.NewClient(newClient(t, addr))
		defer adm.Close()
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = adm.DeleteTopics(dctx, topic)
	})
}
