package app

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/kafkatest"
	"github.com/ferrylabs/ferry/internal/proctest"
)

// hostileConnections is how many connections the test below holds open,
// the figure issue 31 names.
const hostileConnections = 1000

// TestALegitimateRequestIsAnsweredWhileAThousandConnectionsHang runs the
// built gateway against an in-process Kafka and opens 1,000 connections that
// never finish: idle TCP, request headers cut short, and requests that
// announce a body of -gateway.max-request-bytes (or a chunked one) and send
// none of it. A legitimate remote-write request must still be answered 204
// within 2 s, and the gateway's memory must stay within what the
// connections can hold by design (they hold only what they sent, not what
// they announced). Before the body was held as it arrived, 26 connections
// announcing 10 MiB took the whole in-flight account and every other
// request was answered 503.
func TestALegitimateRequestIsAnsweredWhileAThousandConnectionsHang(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	cluster, topic := kafkatest.NewFake(t, 1)
	bin := proctest.Build(t, "./services/ferry-gateway")
	addr := closedAddress(t)
	cmd := exec.Command(bin, "-http.listen-address="+addr, "-kafka.address="+cluster.ListenAddrs()[0],
		"-kafka.topic="+topic, "-gateway.default-tenant=t")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := "http://" + addr + "/api/v1/push"
	waitListening(t, "http://"+addr+"/healthz")
	if code, _ := push(t, url); code != http.StatusNoContent {
		t.Fatalf("a legitimate request before the attack: status %d, want 204", code)
	}
	idle := proctest.PeakRSS(t, cmd.Process.Pid)

	const announce = "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Encoding: snappy\r\n"
	// Announced lengths from the limit down, so that together they could
	// fill the in-flight account to its last byte.
	lengths := []int{10 << 20, 1 << 20, 64 << 10, 4 << 10, 512, 64, 1}
	start := func(i int) string {
		switch i % 4 {
		case 0:
			return "" // idle: connects and says nothing
		case 1:
			return "POST /api/v1/push HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-" // headers cut short
		case 2:
			return announce + fmt.Sprintf("Content-Length: %d\r\n\r\n", lengths[(i/4)%len(lengths)])
		default:
			return announce + "Transfer-Encoding: chunked\r\n\r\n"
		}
	}
	for i := range hostileConnections {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("hostile connection %d: %v", i, err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		if s := start(i); s != "" {
			if _, err := conn.Write([]byte(s)); err != nil {
				t.Fatalf("hostile connection %d: %v", i, err)
			}
		}
	}
	time.Sleep(500 * time.Millisecond) // let the gateway read what they sent
	for range 3 {
		code, took := push(t, url)
		if code != http.StatusNoContent || took > 2*time.Second {
			t.Errorf("a legitimate request beside %d hanging connections: status %d after %s, want 204 within 2s", hostileConnections, code, took)
		}
	}
	peak := proctest.PeakRSS(t, cmd.Process.Pid)
	// What the connections may hold by design: a goroutine, buffers and,
	// for those that announced a body, one step of it each.
	bound := int64(hostileConnections)*(32<<10) + int64(hostileConnections/2)*readStepForTest + rssAllowance
	t.Logf("%d hanging connections: RSS %d MiB before, peak %d MiB (+%d MiB); bound +%d MiB", hostileConnections, idle>>20, peak>>20, (peak-idle)>>20, bound>>20)
	if peak-idle > bound {
		t.Errorf("RSS grew by %d MiB beside %d hanging connections, over %d MiB", (peak-idle)>>20, hostileConnections, bound>>20)
	}
}

// readStepForTest is what a request that announced a body and sent none
// may hold: gateway.readStep, 64 KiB.
const readStepForTest = 64 << 10

// push sends one small valid remote-write 1.0 request and returns its
// status and how long the answer took.
func push(t *testing.T, url string) (int, time.Duration) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body(t)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "snappy")
	client := &http.Client{Timeout: 10 * time.Second}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(fmt.Errorf("legitimate request: %w", err))
	}
	_ = resp.Body.Close()
	return resp.StatusCode, time.Since(start)
}
