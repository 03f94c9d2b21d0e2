package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// faultBackend wraps a backend: it answers one tenant's requests with a
// server error during [from, to) after the first request, and counts the
// records applied per bucket of time for three classes of tenants: the
// faulty one, the others on its partition (they share its consumer, window
// and stream) and the tenants of the other partitions (other consumers: a
// reference for how fast the machine was).
type faultBackend struct {
	inner      backend.Backend
	tenant     string
	partitions int
	from, to   time.Duration
	bucket     time.Duration

	mu     sync.Mutex
	start  time.Time
	faulty []int64
	same   []int64
	other  []int64
	failed int64
}

// partitionOf is the partition the backlog put a tenant on (i mod P).
func partitionOf(tenant string, partitions int) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(tenant, "tenant-"))
	return n % partitions
}

func (b *faultBackend) Push(ctx context.Context, tenant string, req *prompb.WriteRequest) (backend.Result, error) {
	now := time.Now()
	b.mu.Lock()
	if b.start.IsZero() {
		b.start = now
	}
	el := now.Sub(b.start)
	if tenant == b.tenant && el >= b.from && el < b.to {
		b.failed++
		b.mu.Unlock()
		return backend.Result{}, &backend.ServerError{Reason: "bench: injected fault for " + tenant}
	}
	b.mu.Unlock()
	res, err := b.inner.Push(ctx, tenant, req)
	if err != nil {
		return res, err
	}
	b.mu.Lock()
	i := int(time.Since(b.start) / b.bucket)
	for len(b.same) <= i {
		b.faulty, b.same, b.other = append(b.faulty, 0), append(b.same, 0), append(b.other, 0)
	}
	switch {
	case tenant == b.tenant:
		b.faulty[i]++
	case partitionOf(tenant, b.partitions) == partitionOf(b.tenant, b.partitions):
		b.same[i]++
	default:
		b.other[i]++
	}
	b.mu.Unlock()
	return res, nil
}

func (b *faultBackend) Sync(ctx context.Context) (int, error) { return b.inner.Sync(ctx) }
func (b *faultBackend) Close() error                          { return b.inner.Close() }

// timeline is what a fairness run applied over time, per bucket.
type timeline struct {
	Bucket  time.Duration
	Faulty  []int64
	Same    []int64 // other tenants of the faulty tenant's partition
	Other   []int64 // tenants of the other partitions
	End     time.Duration
	Retries float64
	Failed  int64
}

// rate returns records/s of xs over the whole buckets in [from, to).
func rate(xs []int64, bucket, from, to time.Duration) float64 {
	i0, i1 := int(from/bucket), int(to/bucket)
	var n int64
	for i := i0; i < i1 && i < len(xs); i++ {
		n += xs[i]
	}
	if i1 <= i0 {
		return 0
	}
	return float64(n) / (time.Duration(i1-i0) * bucket).Seconds()
}

// measureFairness replays a backlog twice through consumer processes and a
// pusher running in the harness, without and with a fault on tenant-0, and
// looks at the other tenants of tenant-0's partition during the fault: they
// share its consumer, so they are the ones a stuck tenant could stall.
func (e *env) measureFairness(ctx context.Context, bl *backlog) (res fairnessResult) {
	res = fairnessResult{Shape: bl.Shape, FaultTenant: loadgen.Tenant(0), Delay: e.cfg.FaultDelay,
		Length: e.cfg.FaultDuration, Bucket: 500 * time.Millisecond}
	var err error
	// The backlog is sized by time: the fault-free baseline must still be
	// running when the fault window ends, or the comparison has nothing to
	// compare (on a fast run its rate came out 0). When it finished
	// early, the backlog grows by what the baseline's pace says is missing,
	// with a margin, and the baseline runs again.
	cp := *bl
	bl = &cp
	need := res.Delay + res.Length + 2*res.Bucket
	for attempt := 1; ; attempt++ {
		e.logf("fairness: baseline run (no fault), %d records", bl.Records)
		if res.Baseline, err = e.fairnessRun(ctx, bl, res, false); err != nil {
			res.Err = err.Error()
			return res
		}
		if res.Baseline.End >= need || attempt == 3 || ctx.Err() != nil {
			break
		}
		grow := grownRecords(bl.Records, res.Baseline.End, need)
		res.Sizing = append(res.Sizing, fmt.Sprintf("a baseline of %d records finished after %s, grown to %d",
			bl.Records, res.Baseline.End.Round(100*time.Millisecond), grow))
		e.logf("fairness: %s", res.Sizing[len(res.Sizing)-1])
		if err := e.extendBacklog(ctx, bl, grow, 0); err != nil {
			res.Err = "growing the backlog: " + err.Error()
			return res
		}
		pause(ctx)
	}
	res.Shape = bl.Shape
	pause(ctx)
	e.logf("fairness: run with %s failing for %s from %s", res.FaultTenant, res.Length, res.Delay)
	if res.Faulted, err = e.fairnessRun(ctx, bl, res, true); err != nil {
		res.Err = err.Error()
		return res
	}
	// Compare over the whole buckets of the fault window in which the
	// baseline still had work.
	end := min(res.Delay+res.Length, res.Baseline.End)
	res.SameBaseline = rate(res.Baseline.Same, res.Bucket, res.Delay, end)
	res.SameFaulted = rate(res.Faulted.Same, res.Bucket, res.Delay, end)
	res.OtherBaseline = rate(res.Baseline.Other, res.Bucket, res.Delay, end)
	res.OtherFaulted = rate(res.Faulted.Other, res.Bucket, res.Delay, end)

	// A stall is a bucket of the fault window (or of the retry tail after
	// it) in which no other tenant of the partition progressed although
	// some of their records were still pending: once they are all applied,
	// zero progress is just the end.
	var sameTotal int64
	for t := range bl.Shape.Tenants {
		n := bl.Records / int64(bl.Shape.Tenants)
		if int64(t) < bl.Records%int64(bl.Shape.Tenants) {
			n++
		}
		if t != 0 && t%bl.Shape.Partitions == 0 {
			sameTotal += n
		}
	}
	res.SameTotal = sameTotal
	res.SameMinRate = -1
	var applied int64
	for i := range res.Faulted.Same {
		n := res.Faulted.Same[i]
		pending := applied < sameTotal
		applied += n
		if time.Duration(i)*res.Bucket < res.Delay || !pending {
			continue
		}
		r := float64(n) / res.Bucket.Seconds()
		if res.SameMinRate < 0 || r < res.SameMinRate {
			res.SameMinRate = r
		}
		if n == 0 {
			if res.StallBuckets == 0 {
				res.StallAfter = time.Duration(i)*res.Bucket - res.Delay
			}
			res.StallBuckets++
		}
	}
	res.FaultedRetries = res.Faulted.Retries
	if end <= res.Delay+res.Bucket {
		res.Err = fmt.Sprintf("the baseline finished (%s) before the fault would start (%s): give the fairness shape more records", res.Baseline.End, res.Delay)
	} else if end < res.Delay+res.Length {
		res.Note = fmt.Sprintf("the baseline finished after %s, before the end of the fault window: rates compare %s–%s only; give the fairness shape more records",
			res.Baseline.End.Round(100*time.Millisecond), res.Delay, end.Truncate(res.Bucket))
	}
	return res
}

// grownRecords is how many records a fairness backlog needs, given that
// records of it lasted end and the baseline must last need: by the pace
// seen, with half again as margin, and always more than it had.
func grownRecords(records int64, end, need time.Duration) int {
	pace := float64(records) / max(end.Seconds(), 0.1)
	return int(max(float64(records)+1, 1.5*pace*need.Seconds()))
}

// fairnessRecords is the fairness backlog's size before any run: at least
// the -fairness.shape count, and enough for the fault window at the
// fastest pipeline(discard) rate measured for the shape, with half again
// as margin.
func fairnessRecords(minRecords int, fastest float64, window time.Duration) int {
	if math.IsNaN(fastest) {
		return minRecords
	}
	return max(minRecords, int(1.5*fastest*window.Seconds()))
}

func (e *env) fairnessRun(ctx context.Context, bl *backlog, fr fairnessResult, fault bool) (tl timeline, err error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.StageTimeout)
	defer cancel()
	fb := &faultBackend{inner: backend.NewDiscard(), tenant: fr.FaultTenant, partitions: bl.Shape.Partitions, bucket: fr.Bucket}
	if fault {
		fb.from, fb.to = fr.Delay, fr.Delay+fr.Length
	}
	var cfg pusher.Config
	fs := flag.NewFlagSet("pusher", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs) // the defaults
	if err := fs.Parse([]string{"-grpc.listen-address=127.0.0.1:0", "-shutdown-timeout=10s"}); err != nil {
		return tl, err
	}
	if err := cfg.Validate(); err != nil {
		return tl, err
	}
	logger := slog.New(slog.DiscardHandler)
	srv := pusher.NewServer(cfg, fb, logger, prometheus.NewRegistry())
	svc, err := pusher.Listen(cfg, srv, logger)
	if err != nil {
		return tl, err
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- svc.Run(runCtx) }()
	var cs []*consumerProc
	defer func() {
		err = errors.Join(err, stopAll(cs, nil))
		stopRun()
		err = errors.Join(err, <-runDone)
	}()
	ends, err := e.endOffsets(ctx, bl.Topic)
	if err != nil {
		return tl, err
	}
	group := fmt.Sprintf("bench-fairness-%08x", rand.Uint32())
	name := "fairness-baseline"
	if fault {
		name = "fairness-fault"
	}
	// The others of the failing tenant's partition may be fetched at most
	// -consumer.max-uncommitted-records past its stuck record; then their
	// partition pauses by design (it bounds what a crash replays). On a
	// fast run they reached that bound inside the fault window, and the
	// stage judged the bound's pause a stall. What it judges is the
	// window's isolation, so the bound is set above the backlog.
	cs, err = e.startConsumers(ctx, name, bl.Topic, group, svc.Addr(), bl.Shape.Partitions,
		"-consumer.max-uncommitted-records="+strconv.FormatInt(bl.Records+1, 10))
	if err != nil {
		return tl, err
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		done, behind, err := e.committedReached(ctx, group, bl.Topic, ends)
		if err != nil {
			return tl, err
		}
		if done {
			break
		}
		for _, c := range cs {
			if c.exited() {
				return tl, fmt.Errorf("%s exited: %w", c.name, c.exitErr())
			}
		}
		select {
		case <-ctx.Done():
			return tl, fmt.Errorf("%s: not all committed within -stage-timeout (%d records behind)", name, behind)
		case <-tick.C:
		}
	}
	fb.mu.Lock()
	tl = timeline{Bucket: fb.bucket, Faulty: slices.Clone(fb.faulty), Same: slices.Clone(fb.same), Other: slices.Clone(fb.other),
		End: time.Since(fb.start), Failed: fb.failed}
	fb.mu.Unlock()
	for _, c := range cs {
		if m, err := scrape(ctx, c.httpAddr); err == nil {
			tl.Retries += m.sum("ferry_consumer_retries_total", nil)
		}
	}
	return tl, nil
}
