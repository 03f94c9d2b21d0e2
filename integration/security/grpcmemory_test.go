package security

import (
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/insecure"
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
// The process's RSS must stay within the documented bound; once the
// clients leave every stream's place comes back, and further rounds reuse
// the memory instead of growing the pusher again. And while 400 such calls
// wait (not retried), a legitimate PushOne takes the place of one that has
// sent nothing whole for a second and is answered within 2 s.
func TestUnfinishedMessagesCannotGrowThePusherPastItsBound(t *testing.T) {
	p := startPusherProc(t,
		"-grpc.max-open-streams="+strconv.Itoa(boundStreams),
		"-pusher.max-request-bytes="+strconv.Itoa(boundRequestBytes),
		"-pusher.max-pending-bytes="+strconv.Itoa(boundPendingBytes))
	base := p.rss(t)
	var peaks []int64
	for range 3 {
		peaks = append(peaks, unfinishedMessagesRound(t, p, base, true, nil))
		waitUntil(t, 10*time.Second, "every stream closed after the clients left", func() error {
			if v := p.metric(t, "ferry_pusher_grpc_open_streams"); v != 0 {
				return errorf("ferry_pusher_grpc_open_streams %v", v)
			}
			return nil
		})
	}
	t.Logf("RSS: %d MiB at rest, peaks of three rounds %d, %d and %d MiB; bound %d MiB above rest",
		base>>20, peaks[0]>>20, peaks[1]>>20, peaks[2]>>20, memoryBound>>20)
	// Memory a round kept would add a round's worth of messages (16
	// streams × 8 MiB) to each later one: two to the third round.
	if grew := peaks[2] - peaks[0]; grew > 3*boundStreams*8<<20/2 {
		t.Errorf("the third round grew the pusher to %d MiB after %d MiB in the first: memory is not reused", peaks[2]>>20, peaks[0]>>20)
	}
	if v := p.metric(t, `ferry_pusher_grpc_refused_total{reason="open_streams"}`); v <= 0 {
		t.Errorf("ferry_pusher_grpc_refused_total{reason=\"open_streams\"} = %v, want the refused calls counted", v)
	}
	unfinishedMessagesRound(t, p, base, false, func() {
		took := pushOneOnANewConnection(t, p.grpcAddr, insecure.NewCredentials())
		t.Logf("PushOne beside 400 unfinished calls: answered in %s", took.Round(time.Millisecond))
		if took > 2*time.Second {
			t.Errorf("PushOne beside 400 unfinished calls took %s, want at most 2s", took)
		}
	})
}

// unfinishedMessagesRound runs the attack for a few seconds while watching
// the pusher's RSS, fails the test as soon as it passes base+memoryBound,
// and returns its peak. With retry a refused call is made again; during,
// if not nil, runs 1.5 s into the round.
func unfinishedMessagesRound(t *testing.T, p *pusherProc, base int64, retry bool, during func()) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Second)
	defer cancel()
	var sent atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		cc := dialH2(t, p.grpcAddr)
		for range 100 {
			wg.Go(func() { sendUnfinishedMessages(ctx, cc, p.grpcAddr, retry, &sent) })
		}
	}
	var peak int64
	duringAt := time.Now().Add(1500 * time.Millisecond)
	for ctx.Err() == nil {
		if during != nil && time.Now().After(duringAt) {
			during()
			during = nil
		}
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
func dialH2(t *testing.T, addr string) *http.ClientConn {
	t.Helper()
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protocols}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc, err := tr.NewClientConn(ctx, "http", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// sendUnfinishedMessages calls PushOne on cc with a message it never
// finishes, with retry again each time the pusher answers, until ctx ends.
func sendUnfinishedMessages(ctx context.Context, cc *http.ClientConn, addr string, retry bool, sent *atomic.Int64) {
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
		if !retry {
			<-ctx.Done()
			return
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
		binary.BigEndian.PutUint32(prefix[1:], uint32(m.size))
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
