package security

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// The figures of the pusher's gRPC memory account (pusher/transport.go)
// at the flags TestUnfinishedMessagesCannotGrowThePusherPastItsBound
// gives it: each open stream may hold a message of -pusher.max-request-bytes
// plus 4 MiB three times over while it is decoded, a 1 MiB window and 64
// KiB of headers.
const (
	boundStreams      = 16
	boundRequestBytes = 10 << 20
	boundPendingBytes = 64 << 20
	boundPerStream    = 3*(boundRequestBytes+4<<20) + 1<<20 + 64<<10
	memoryBound       = boundStreams*boundPerStream + boundPendingBytes
)

// TestUnfinishedMessagesCannotGrowThePusherPastItsBound replays finding 1
// of issue 31 against the pusher binary: 4 connections × 100 PushOne calls,
// each announcing an 8 MiB message and sending all of it but its last
// byte, retried when refused. gRPC holds what such a call sent; before the
// server-wide bound on open streams this grew the pusher by 400 × 8 MiB.
// The process's RSS must stay within the documented bound, and a second
// round after the first clients left must not grow it further.
func TestUnfinishedMessagesCannotGrowThePusherPastItsBound(t *testing.T) {
	p := startPusherProc(t,
		"-grpc.max-open-streams="+strconv.Itoa(boundStreams),
		"-pusher.max-request-bytes="+strconv.Itoa(boundRequestBytes),
		"-pusher.max-pending-bytes="+strconv.Itoa(boundPendingBytes))
	base := p.rss(t)
	first := unfinishedMessagesRound(t, p, base)
	second := unfinishedMessagesRound(t, p, base)
	t.Logf("RSS: %d MiB at rest, peak %d MiB in the first round, %d MiB in the second; bound %d MiB above rest",
		base>>20, first>>20, second>>20, memoryBound>>20)
	// The second round reuses what the first one left: a leak would add
	// another round's worth (16 streams × 8 MiB).
	if second > first+boundStreams*8<<20/2 {
		t.Errorf("the second round grew the pusher to %d MiB after %d MiB in the first: memory is not given back", second>>20, first>>20)
	}
}

// unfinishedMessagesRound runs the attack for a few seconds while watching
// the pusher's RSS, fails the test as soon as it passes base+memoryBound,
// and returns its peak.
func unfinishedMessagesRound(t *testing.T, p *pusherProc, base int64) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	var sent atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		cc := dialH2(t, p.grpcAddr)
		for range 100 {
			wg.Go(func() { sendUnfinishedMessages(ctx, cc, p.grpcAddr, &sent) })
		}
	}
	var peak int64
	for ctx.Err() == nil {
		rss := p.rss(t)
		peak = max(peak, rss)
		if rss-base > memoryBound {
			cancel()
			wg.Wait()
			t.Fatalf("pusher RSS %d MiB, %d MiB above its %d MiB at rest: over the documented bound of %d MiB (%d MiB of messages sent)",
				rss>>20, (rss-base)>>20, base>>20, memoryBound>>20, sent.Load()>>20)
		}
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	t.Logf("round: %d MiB of unfinished messages sent, pusher peak RSS %d MiB", sent.Load()>>20, peak>>20)
	if sent.Load() < boundStreams*8<<20 {
		t.Fatalf("only %d MiB sent: the attack did not reach the pusher", sent.Load()>>20)
	}
	return peak
}

// dialH2 opens a plaintext HTTP/2 connection to addr, closed when the test
// ends.
func dialH2(t *testing.T, addr string) *http2.ClientConn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(context.Context, string, string, *tls.Config) (net.Conn, error) {
		return nil, errorf("dialH2 dials itself")
	}}
	cc, err := tr.NewClientConn(conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// sendUnfinishedMessages calls PushOne on cc with a message it never
// finishes, again each time the pusher answers, until ctx ends.
func sendUnfinishedMessages(ctx context.Context, cc *http2.ClientConn, addr string, sent *atomic.Int64) {
	for ctx.Err() == nil {
		body := &unfinishedMessage{ctx: ctx, size: 8 << 20, sent: sent}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/ferry.v1.PusherService/PushOne", body)
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("TE", "trailers")
		resp, err := cc.RoundTrip(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		select { // refused: try again soon, as a determined client would
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// unfinishedMessage is a request body of one gRPC message that announces
// size bytes and sends all but the last one, then waits for ctx.
type unfinishedMessage struct {
	ctx  context.Context
	size int
	off  int // of the 5-byte prefix and the message
	sent *atomic.Int64
}

func (m *unfinishedMessage) Read(p []byte) (int, error) {
	if m.off < 5 {
		var prefix [5]byte
		binary.BigEndian.PutUint32(prefix[1:], uint32(m.size)) //nolint:gosec // 8 MiB
		n := copy(p, prefix[m.off:])
		m.off += n
		return n, nil
	}
	if rest := 5 + m.size - 1 - m.off; rest > 0 {
		n := min(len(p), rest)
		clear(p[:n])
		m.off += n
		m.sent.Add(int64(n))
		return n, nil
	}
	<-m.ctx.Done()
	return 0, m.ctx.Err()
}
