package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ferrylabs/ferry/internal/loadgen"
	"github.com/ferrylabs/ferry/proto/codec"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/prompb"
)

// The scale stage (issue 17, target 6) grows one tsdb pusher to
// -scale.series active series through the pipeline, in two variants, and
// measures memory per series, the ingestion rate once every series exists,
// and how long the pusher takes to come back with all of them (WAL replay).
const (
	scalePasses          = 3    // pass 1 creates the series, passes 2 and 3 append to them
	scaleSeriesPerRecord = 1000 // series per record: a 70 KB value, well inside Kafka's 1 MB
	scalePassStepMs      = 15_000
)

// scaleResult is one variant of the scale stage.
type scaleResult struct {
	Tenants, SeriesPerTenant int
	Partitions               int
	Series                   int64 // active series: Tenants × SeriesPerTenant
	Backlog                  *backlog
	PusherArgs               []string
	Stage                    stageResult

	PeakRSS    int64   // the pusher's VmHWM over the stage
	HeadSeries float64 // ferry_pusher_tsdb_head_series_all_tenants at the end
	GrowTime   time.Duration
	AtSizeRate float64 // samples/s once every series existed (passes 2..); NaN if no scrape saw it

	// Restart after SIGTERM with the same -storage.path: until /ready, and
	// until every tenant was opened again (one PushOne each, as tenants open
	// on first use) and the heads hold every series again.
	RestartReady, RestartReplayed time.Duration
	RestartHeadSeries             float64
	RestartPeakRSS                int64
	Err                           string
}

// Variant names the variant for tables.
func (s *scaleResult) Variant() string {
	return fmt.Sprintf("%s tenant%s × %s series", fmtNum(float64(s.Tenants)), cond(s.Tenants == 1, "", "s"), fmtNum(float64(s.SeriesPerTenant)))
}

func (s *scaleResult) bytesPerSeries() float64 {
	if s.Series == 0 {
		return 0
	}
	return float64(s.PeakRSS) / float64(s.Series)
}

// scaleVariants are the two ways of reaching n series: √n tenants of √n
// series (1,000 × 1,000 for a million), and one tenant with all of them.
func scaleVariants(n int) []*scaleResult {
	t := max(1, int(math.Round(math.Sqrt(float64(n)))))
	return []*scaleResult{
		{Tenants: t, SeriesPerTenant: max(1, n/t), Partitions: 4},
		// One tenant is one partition; the default per-tenant series limit
		// (500,000) would refuse the rest.
		{Tenants: 1, SeriesPerTenant: n, Partitions: 1, PusherArgs: []string{"-limits.max-series-per-tenant=0"}},
	}
}

// scaleRequest is record k of a tenant in a pass: series
// [k×1000, (k+1)×1000) of the tenant, one sample each.
func scaleRequest(tenant string, seriesPerTenant, k, pass int) *prompb.WriteRequest {
	from := k * scaleSeriesPerRecord
	to := min(from+scaleSeriesPerRecord, seriesPerTenant)
	ts := sampleStart + int64(pass)*scalePassStepMs
	req := &prompb.WriteRequest{Timeseries: make([]prompb.TimeSeries, 0, to-from)}
	for s := from; s < to; s++ {
		req.Timeseries = append(req.Timeseries, prompb.TimeSeries{
			Labels: []prompb.Label{
				{Name: "__name__", Value: "ferry_scale_value"},
				{Name: "instance", Value: "scale-" + tenant},
				{Name: "series", Value: strconv.Itoa(s)},
			},
			Samples: []prompb.Sample{{Value: float64(pass), Timestamp: ts}},
		})
	}
	return req
}

// measureScale runs every variant.
func (e *env) measureScale(ctx context.Context) []scaleResult {
	var out []scaleResult
	for _, v := range scaleVariants(e.cfg.ScaleSeries) {
		if ctx.Err() != nil {
			break
		}
		pause(ctx)
		e.scaleVariant(ctx, v)
		out = append(out, *v)
		e.logf("scale %s: %s per series (peak RSS %s), %.0f samples/s at size, restart: ready %s, replayed %s%s",
			v.Variant(), fmtBytes(int64(v.bytesPerSeries())), fmtBytes(v.PeakRSS), v.AtSizeRate,
			fmtDur(v.RestartReady), fmtDur(v.RestartReplayed), cond(v.Err != "", " FAILED: "+v.Err, ""))
	}
	return out
}

func (e *env) scaleVariant(ctx context.Context, v *scaleResult) {
	v.Series = int64(v.Tenants) * int64(v.SeriesPerTenant)
	recordsPerTenant := (v.SeriesPerTenant + scaleSeriesPerRecord - 1) / scaleSeriesPerRecord
	name := fmt.Sprintf("scale-%dx%d", v.Tenants, v.SeriesPerTenant)
	e.logf("scale %s: producing %d passes over %d series", v.Variant(), scalePasses, v.Series)
	topic, err := e.createTopic(ctx, name, v.Partitions)
	if err != nil {
		v.Err = err.Error()
		return
	}
	bl := &backlog{Topic: topic, Shape: Shape{Partitions: v.Partitions, Tenants: v.Tenants, Series: min(v.SeriesPerTenant, scaleSeriesPerRecord)}}
	var pass, k, t int
	start := time.Now()
	n, bytes, err := e.produceRecords(ctx, func() *kgo.Record {
		if pass == scalePasses {
			return nil
		}
		tenant := loadgen.Tenant(t)
		val, err := scaleRequest(tenant, v.SeriesPerTenant, k, pass).Marshal()
		if err != nil {
			return nil // cannot happen for these requests; the count check below would say
		}
		r := &kgo.Record{Topic: topic, Partition: int32(t % v.Partitions), Key: []byte(tenant), Value: val} //nolint:gosec // small
		// Tenants interleaved within a pass, passes one after another.
		if t++; t == v.Tenants {
			t = 0
			if k++; k == recordsPerTenant {
				k, pass = 0, pass+1
			}
		}
		return r
	})
	if err == nil && n != int64(scalePasses*recordsPerTenant*v.Tenants) {
		err = fmt.Errorf("produced %d records, want %d", n, scalePasses*recordsPerTenant*v.Tenants)
	}
	if err != nil {
		v.Err = err.Error()
		return
	}
	bl.Records, bl.Bytes, bl.Samples, bl.Took = n, bytes, v.Series*scalePasses, time.Since(start)
	bl.Shape.Records = int(n)
	v.Backlog = bl

	dir, err := os.MkdirTemp(e.work, "tsdb-"+name+"-")
	if err != nil {
		v.Err = err.Error()
		return
	}
	args := append([]string{"-storage.path=" + dir}, v.PusherArgs...)
	e.logf("scale %s: %d records, %.0f MB; replaying into a tsdb pusher", v.Variant(), n, float64(bytes)/1e6)
	// Growth ends at the first scrape that finds every series in the heads
	// (partitions run at their own pace, so pass 1 of one may overlap pass
	// 2 of another); the rate at size is over the samples accepted after
	// it, until the last ack.
	var (
		mu             sync.Mutex
		origin         time.Time
		t0, tGrown     time.Duration
		grown, lastAcc float64
		tLast          time.Duration
	)
	// A million series through the TSDB take minutes on a busy 2-core
	// machine: three times -stage-timeout.
	v.Stage = e.runPipeline(ctx, bl, name, pipelineOpts{backend: "tsdb", pusherArgs: args, timeout: 3 * e.cfg.StageTimeout,
		during: func(ctx context.Context, _ []*consumerProc, p *pusherProc) {
			mu.Lock()
			origin = time.Now() // about when runPipeline started its clock
			mu.Unlock()
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				if m, err := scrape(ctx, p.httpAddr); err == nil {
					acc := m.sum("ferry_pusher_samples_total", map[string]string{"outcome": "accepted"})
					hs := m.sum("ferry_pusher_tsdb_head_series_all_tenants", nil)
					mu.Lock()
					at := time.Since(origin)
					if t0 == 0 && acc > 0 {
						t0 = at
					}
					if tGrown == 0 && hs >= float64(v.Series) {
						tGrown, grown = at, acc
					}
					if acc > lastAcc {
						tLast, lastAcc = at, acc
					}
					v.HeadSeries = max(v.HeadSeries, hs)
					mu.Unlock()
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		},
		after: func(ctx context.Context, p *pusherProc) {
			if m, err := scrape(ctx, p.httpAddr); err == nil {
				mu.Lock()
				v.HeadSeries = max(v.HeadSeries, m.sum("ferry_pusher_tsdb_head_series_all_tenants", nil))
				mu.Unlock()
			}
		}})
	if v.Stage.Err != "" {
		v.Err = v.Stage.Err
		return
	}
	mu.Lock()
	v.PeakRSS = v.Stage.PusherPeakRSS
	if tGrown > t0 {
		v.GrowTime = tGrown - t0
	}
	// The last ack, when runPipeline saw it, ends the window with every
	// sample accepted; else the last scrape that saw progress does.
	if v.Stage.LastAck > tLast {
		tLast, lastAcc = v.Stage.LastAck, float64(bl.Samples)
	}
	v.AtSizeRate = math.NaN()
	if tGrown > 0 && tLast > tGrown && lastAcc > grown {
		v.AtSizeRate = (lastAcc - grown) / (tLast - tGrown).Seconds()
	}
	mu.Unlock()
	// runPipeline stopped the pusher with SIGTERM; start it again on the
	// same directory.
	if err := e.scaleRestart(ctx, v, name, args); err != nil {
		v.Err = "restart: " + err.Error()
	}
}

// scaleRestart starts a pusher on the variant's storage and times it until
// /ready and until every tenant's TSDB is open with all its series back in
// memory. Tenants open on first use, so one PushOne per tenant (a sample
// after the last pass) makes each replay its WAL.
func (e *env) scaleRestart(ctx context.Context, v *scaleResult, name string, args []string) error {
	g, err1 := freeAddr()
	h, err2 := freeAddr()
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	all := append([]string{"-grpc.listen-address=" + g, "-http.listen-address=" + h, "-pusher.backend=tsdb", "-log.level=warn"}, args...)
	all = append(all, e.cfg.PusherArgs...)
	start := time.Now()
	c, err := procs.start(name+"-restart-pusher", e.pusherBin, all, e.logDir)
	if err != nil {
		return err
	}
	defer func() { _ = c.stop(40 * time.Second) }()
	if err := waitReady(ctx, c, h, e.cfg.StageTimeout); err != nil {
		return err
	}
	v.RestartReady = time.Since(start)
	conn, err := grpc.NewClient(g, grpc.WithTransportCredentials(insecure.NewCredentials()), codec.DialOption())
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	client := ferryv1.NewPusherServiceClient(conn)
	work := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for t := range work {
				req := &ferryv1.PushRequest{Tenant: loadgen.Tenant(t)}
				req.WriteRequest = *scaleRequest(req.Tenant, 1, 0, scalePasses)
				resp, err := client.PushOne(ctx, req)
				if err == nil && resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
					err = fmt.Errorf("PushOne for %s: %s %s", req.Tenant, resp.Status, resp.Reason)
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for t := range v.Tenants {
		work <- t
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	m, err := scrape(ctx, h)
	if err != nil {
		return err
	}
	v.RestartReplayed = time.Since(start)
	v.RestartHeadSeries = m.sum("ferry_pusher_tsdb_head_series_all_tenants", nil)
	v.RestartPeakRSS = c.usage().PeakRSS
	if v.RestartHeadSeries < float64(v.Series) {
		return fmt.Errorf("after the restart the heads hold %.0f series, want %d", v.RestartHeadSeries, v.Series)
	}
	return nil
}

func (r *report) scale(w writer) {
	if len(r.Scale) == 0 {
		return
	}
	w("\n### Scale: one pusher (tsdb) grown to %s active series\n\n", fmtNum(float64(r.cfg.ScaleSeries)))
	w("Each variant is a fresh topic of %d passes over all its series, %d series per record with one sample each (pass 1 creates the series, the later passes append to them), ", scalePasses, scaleSeriesPerRecord)
	w("replayed by one ferry-consumer per partition into a fresh tsdb pusher with default flags. ")
	w("Memory per series is the pusher's peak RSS (VmHWM: everything it holds) over the active series. ")
	w("Growth is from the first accepted sample to the first scrape (every 100 ms) that finds every series in the heads; the rate at size is the samples accepted after that scrape over the time to the last ack (n/a when no scrape found them all before it). ")
	w("Restart: the pusher is stopped with SIGTERM once everything is committed, and started again on the same -storage.path; tenants open on first use, so the harness then sends one PushOne per tenant and the replay time ends when all are answered, with the heads' series counted.\n\n")
	w("| variant | partitions | backlog | pusher peak RSS | per active series | head series | growth | samples/s at size | pusher CPU s / M samples | restart: ready | every WAL replayed | series after restart | peak RSS after restart | note |\n")
	w("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, s := range r.Scale {
		if s.Err != "" && s.Stage.Err != "" || s.Backlog == nil {
			w("| %s | %d | | | | | | | | | | | | FAILED: %s |\n", s.Variant(), s.Partitions, oneLine(s.Err))
			continue
		}
		note := s.Stage.note()
		if len(s.PusherArgs) > 0 {
			note = fmt.Sprintf("pusher `%v`; %s", s.PusherArgs, note)
		}
		if s.Err != "" {
			note = "FAILED: " + s.Err + "; " + note
		}
		w("| %s | %d | %s records, %.0f MB | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Variant(), s.Partitions,
			fmtNum(float64(s.Backlog.Records)), float64(s.Backlog.Bytes)/1e6, fmtBytes(s.PeakRSS), fmtBytes(int64(s.bytesPerSeries())),
			fmtNum(s.HeadSeries), fmtDur(s.GrowTime), fmtNum(s.AtSizeRate), fmtCPU(s.Stage, s.Stage.PusherCPU),
			fmtDur(s.RestartReady), fmtDur(s.RestartReplayed), fmtNum(s.RestartHeadSeries), rssCell(s.RestartPeakRSS), oneLine(note))
	}
}
