package integration

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRemoteWriteToVictoriaMetrics runs the remote-write backend against a
// second real receiver, a VictoriaMetrics single node, and restarts it
// while records flow. `make test-victoriametrics` builds the binary from
// the Go module proxy and runs this test with it in FERRY_VICTORIAMETRICS.
//
// VictoriaMetrics answers a write once it holds it in memory and writes it
// to disk up to a few seconds later, so it is stopped with SIGTERM, which
// flushes, rather than killed: with this backend Ferry's durability is the
// receiver's (docs/remote-write.md, "Durability"). -dedup.minScrapeInterval
// makes it keep one of the identical samples a resent request brings, as a
// Prometheus TSDB does; /internal/force_flush and the search flags make
// what it acknowledged searchable before the samples are counted.
func TestRemoteWriteToVictoriaMetrics(t *testing.T) {
	t.Parallel()
	bin := os.Getenv("FERRY_VICTORIAMETRICS")
	if bin == "" {
		t.Skip("skipping: set FERRY_VICTORIAMETRICS to a victoria-metrics binary (make test-victoriametrics builds one)")
	}
	addr, dir := freeAddr(t), t.TempDir()
	recv := runReceiver(t, &receiver{name: "victoria-metrics", addr: addr, dir: dir, ready: "/health", flush: "/internal/force_flush", args: []string{
		bin,
		"-storageDataPath=" + filepath.Join(dir, "data"),
		"-httpListenAddr=" + addr,
		"-dedup.minScrapeInterval=1ms",
		"-search.latencyOffset=0s",
		"-search.disableCache",
	}})
	remoteWriteThroughAnOutage(t, recv, recv.stop)
}
