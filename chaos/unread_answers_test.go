package chaos

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ferrylabs/ferry/proto/codec"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

// unreadRSSBound is the most resident memory the pusher process may reach
// while clients flood it with requests whose answers they never read,
// beside normal load. Without the bounds on what a stream holds (before
// -pusher.max-pending-per-stream) such a flood grew the pusher by about
// 10 MB per 1,000 requests (200,000 requests: 2.75 GB). With them a stream
// holds at most 1,024 requests and a 1 MiB flow-control window, so the
// flood of this test costs its streams × (1,024 requests + 1 MiB) on top of
// the TSDB's own memory, well under this bound. Measured on the 2-core
// development machine: 94 MiB at the default scale (4 streams, 5 s), 273
// MiB at the large one (16 streams, 60 s: each rude tenant is a TSDB of its
// own, with a 6 MiB exemplar buffer); 764 MiB after 5 s at the default
// scale with the per-stream bound disabled.
const unreadRSSBound = 400 << 20

// TestClientThatNeverReadsAnswers runs normal load (a producer, a consumer,
// the real pusher process with its TSDB) while a misbehaving client opens
// Push streams beside it and sends requests without ever reading an
// answer. It proves the pusher's memory stays bounded (its RSS, read from
// /proc, stays under unreadRSSBound), the flood is held back rather than
// read (the rude client gets only so many requests through), and the
// normal load is still delivered and committed to the end.
func TestClientThatNeverReadsAnswers(t *testing.T) {
	streams, floodFor := 4, 5*time.Second
	if currentScale().name == "large" {
		streams, floodFor = 16, 60*time.Second
	}
	const steps = 200
	pl := newPipeline(t, 1, 2, 2)
	p := startPusherProc(t)
	pl.startConsumers(p.grpcAddr)
	pid := p.pid()

	ctx, cancel := context.WithTimeout(context.Background(), floodFor)
	defer cancel()
	var peak atomic.Int64
	monitorDone := make(chan struct{})
	go func() {
		defer close(monitorDone)
		for ctx.Err() == nil {
			if rss, err := residentBytes(pid); err == nil {
				peak.Store(max(peak.Load(), rss))
			}
			sleepCtx(ctx, 100*time.Millisecond)
		}
	}()
	sent := floodWithoutReading(ctx, t, p.grpcAddr, streams, pl)

	pr := pl.newProducer()
	if err := pr.produce(context.Background(), 0, steps, floodFor/2); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	<-monitorDone
	pl.waitCommittedToEnd(time.Minute)
	check := pl.verifyTSDB(p.httpAddr, steps)

	if rss := peak.Load(); rss == 0 || rss > unreadRSSBound {
		t.Errorf("pusher peak RSS %d MiB, bound %d MiB", rss>>20, unreadRSSBound>>20)
	}
	// Each stream can have about its pending bound and its windows' worth
	// of requests in the pusher; a pusher that read everything took tens
	// of thousands per second.
	if n := sent.Load(); n > int64(streams)*20_000 {
		t.Errorf("the rude client got %d requests through on %d streams: the pusher kept reading them", n, streams)
	}
	report(t, outcome{
		name: "TestClientThatNeverReadsAnswers", produced: int64(steps * pl.tenants),
		delivered: check.records, lost: check.lost,
		extra: fmt.Sprintf("unread_streams=%d unread_requests_sent=%d peak_rss_mib=%d", streams, sent.Load(), peak.Load()>>20),
	})
}

// floodWithoutReading opens streams Push streams, each on its own
// connection, and sends requests on them until ctx ends, reading nothing.
// It returns the count of requests sent, which stops growing once flow
// control holds the client back.
func floodWithoutReading(ctx context.Context, t *testing.T, addr string, streams int, pl *pipeline) *atomic.Int64 {
	t.Helper()
	var sent atomic.Int64
	var wg sync.WaitGroup
	for s := range streams {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), codec.DialOption())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		stream, err := ferryv1.NewPusherServiceClient(conn).Push(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tenant := "rude-" + strconv.Itoa(s)
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				req := &ferryv1.PushRequest{RequestId: uint64(i + 1), Tenant: tenant, Sequence: uint64(i%2) * uint64(i+1),
					WriteRequest: *pl.shape.Request(tenant, i%1000)}
				if stream.Send(req) != nil {
					return
				}
				sent.Add(1)
			}
		})
	}
	t.Cleanup(wg.Wait)
	return &sent
}

// residentBytes reads VmRSS of process pid from /proc.
func residentBytes(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// pid is the process ID of the current run.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}
