package app

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"

	"github.com/ferrylabs/ferry/internal/proctest"
)

// The gateway's memory bound, as README's "Bounds against abuse" states
// it: what requests hold is counted against -gateway.max-inflight-bytes
// before it is allocated, and the binary sets Go's memory limit to 1.5
// times that plus 64 MiB, so the process grows by at most twice the
// in-flight bound over its idle size, plus rssAllowance for the runtime's
// own growth under load (goroutines, buffers of many connections).
const rssAllowance = 64 << 20

// TestTheGatewayBinaryStaysWithinItsBoundUnderAmplifyingRequests runs the
// built binary under the two attacks of issue 31 finding 2 (a 1.0
// request of 9 MiB of empty series, 432 KiB compressed; 2.0 requests of
// empty symbols and series, 24 at once) and reads its peak RSS from
// /proc. FERRY_GATEWAY_BIN runs another binary instead (an older build,
// for a before-and-after figure); FERRY_GATEWAY_MAX_INFLIGHT sets
// -gateway.max-inflight-bytes (64 MiB here, to keep the test small).
func TestTheGatewayBinaryStaysWithinItsBoundUnderAmplifyingRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	inflight := int64(64 << 20)
	if v, err := strconv.ParseInt(os.Getenv("FERRY_GATEWAY_MAX_INFLIGHT"), 10, 64); err == nil {
		inflight = v // the default's figure: 268435456
	}
	bin := os.Getenv("FERRY_GATEWAY_BIN")
	if bin == "" {
		bin = proctest.Build(t, "./services/ferry-gateway")
	}
	addr := closedAddress(t) // a port for the gateway
	cmd := exec.Command(bin, "-http.listen-address="+addr, "-kafka.address="+closedAddress(t),
		"-gateway.default-tenant=t", fmt.Sprintf("-gateway.max-inflight-bytes=%d", inflight))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := "http://" + addr + "/api/v1/push"
	waitListening(t, "http://"+addr+"/healthz")
	idle := proctest.PeakRSS(t, cmd.Process.Pid)

	emptyV1 := snappy.Encode(nil, bytes.Repeat([]byte{0x0a, 0x00}, 9<<20/2))
	emptyV2Series := snappy.Encode(nil, bytes.Repeat([]byte{0x2a, 0x00}, 9<<20/2))
	emptyV2Symbols := snappy.Encode(nil, bytes.Repeat([]byte{0x22, 0x00}, 9<<20/2))
	codes := map[int]int{}
	var mu sync.Mutex
	send := func(body []byte, ct string) {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		req.Header.Set("Content-Encoding", "snappy")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		_ = resp.Body.Close()
		mu.Lock()
		codes[resp.StatusCode]++
		mu.Unlock()
	}
	const v2 = "application/x-protobuf;proto=io.prometheus.write.v2.Request"
	for round := range 3 {
		send(emptyV1, "application/x-protobuf")
		var wg sync.WaitGroup
		for i := range 24 {
			body := emptyV2Series
			if (i+round)%2 == 0 {
				body = emptyV2Symbols
			}
			wg.Go(func() { send(body, v2) })
		}
		wg.Wait()
	}
	peak := proctest.PeakRSS(t, cmd.Process.Pid)
	t.Logf("1.0 body of %d bytes, 2.0 bodies of %d and %d; answers %v; RSS %d MiB idle, peak %d MiB (+%d MiB), bound +%d MiB",
		len(emptyV1), len(emptyV2Series), len(emptyV2Symbols), codes, idle>>20, peak>>20, (peak-idle)>>20, (2*inflight+rssAllowance)>>20)
	if peak-idle > 2*inflight+rssAllowance {
		t.Errorf("RSS grew by %d MiB, over the bound of %d MiB (twice -gateway.max-inflight-bytes and %d MiB)", (peak-idle)>>20, (2*inflight+rssAllowance)>>20, rssAllowance>>20)
	}
	if codes[http.StatusNoContent] > 0 && codes[http.StatusBadRequest] == 0 {
		t.Errorf("answers %v: the hostile requests were accepted", codes)
	}
}

// waitListening waits until url answers.
func waitListening(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			_ = resp.Body.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not answer within 30s", url)
}
