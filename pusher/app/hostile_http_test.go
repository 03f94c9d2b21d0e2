package app

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/proctest"
)

// TestAQueryIsAnsweredWhileAThousandHTTPConnectionsHang runs the built
// pusher and opens 1,000 connections to its HTTP port (the query API and
// remote read, whose callers the threat model does not trust) that never
// finish: idle TCP, headers cut short, and a remote read and a query that
// announce a body and send none of it. A legitimate query must still be
// answered within 2 s, and the pusher's memory must stay within what the
// connections hold by design: a goroutine and buffers each.
func TestAQueryIsAnsweredWhileAThousandHTTPConnectionsHang(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const hostile = 1000
	bin := proctest.Build(t, "./services/ferry-pusher")
	httpAddr, grpcAddr := proctest.FreeAddr(t), proctest.FreeAddr(t)
	cmd := exec.Command(bin, "-http.listen-address="+httpAddr, "-grpc.listen-address="+grpcAddr,
		"-storage.path="+t.TempDir(), "-query.default-tenant=t")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	query := "http://" + httpAddr + "/api/v1/query?query=vector(1)"
	deadline := time.Now().Add(30 * time.Second)
	for code, _ := get(query); code != http.StatusOK; code, _ = get(query) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer 200 within 30s", query)
		}
		time.Sleep(50 * time.Millisecond)
	}
	before := proctest.RSS(t, cmd.Process.Pid)

	starts := []string{
		"", // idle
		"GET /api/v1/query?query=up HTTP/1.1\r\nHost: x\r\nX-Scope-", // headers cut short
		"POST /api/v1/read HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Encoding: snappy\r\nContent-Length: 1048576\r\n\r\n",
		"POST /api/v1/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000000\r\n\r\nquery=",
	}
	for i := range hostile {
		conn, err := net.DialTimeout("tcp", httpAddr, 5*time.Second)
		if err != nil {
			t.Fatalf("hostile connection %d: %v", i, err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		if s := starts[i%len(starts)]; s != "" {
			if _, err := conn.Write([]byte(s)); err != nil {
				t.Fatalf("hostile connection %d: %v", i, err)
			}
		}
	}
	time.Sleep(500 * time.Millisecond) // let the pusher read what they sent
	for range 3 {
		code, took := get(query)
		if code != http.StatusOK || took > 2*time.Second {
			t.Errorf("a query beside %d hanging connections: status %d after %s, want 200 within 2s", hostile, code, took)
		}
	}
	after := proctest.RSS(t, cmd.Process.Pid)
	// A goroutine and its buffers per connection, generously.
	const perConnection, allowance = 32 << 10, 64 << 20
	bound := int64(hostile*perConnection + allowance)
	t.Logf("%d hanging connections: RSS %d MiB before, %d MiB after (+%d MiB); bound +%d MiB", hostile, before>>20, after>>20, (after-before)>>20, bound>>20)
	if after-before > bound {
		t.Errorf("RSS grew by %d MiB beside %d hanging connections, over %d MiB", (after-before)>>20, hostile, bound>>20)
	}
}

// get fetches url and returns its status (0 when it failed) and how long
// the answer took.
func get(url string) (int, time.Duration) {
	client := &http.Client{Timeout: 10 * time.Second}
	start := time.Now()
	resp, err := client.Get(url)
	if err != nil {
		return 0, time.Since(start)
	}
	_ = resp.Body.Close()
	return resp.StatusCode, time.Since(start)
}
