package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
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
// -scale.series active series through the pipeline, in three variants, and
// measures memory per series, the ingestion rate once every series exists,
// and how long the pusher takes to come back with all of them (WAL replay).
// The many-tenant variant runs again in the shared tenancy, where the
// pusher's fixed cost per tenant is what differs; one tenant is one TSDB in
// either tenancy, so that variant runs once.
const (
	scalePasses          = 3    // pass 1 creates the series, passes 2 and 3 append to them
	scaleSeriesPerRecord = 1000 // series per record: a 70 KB value, well inside Kafka's 1 MB
	scalePassStepMs      = 15_000
)

// scaleResult is one variant of the scale stage.
type scaleResult struct {
	Tenants, SeriesPerTenant int
	Partitions               int
	Series                   int64    // active series: Tenants × SeriesPerTenant
	Backlog                  *backlog // both phases together
	PusherArgs               []string
	Grow                     stageResult // phase 1: the first pass creates every series
	Stage                    stageResult // phase 2: the other passes, at full size

	// Shared runs the pusher with -storage.tenancy=shared (in PusherArgs):
	// every tenant in one TSDB, so one WAL to replay on restart.
	Shared bool

	PeakRSS    int64   // the pusher's VmHWM over both phases
	HeadSeries float64 // ferry_pusher_tsdb_head_series_all_tenants at the end
	GrowTime   time.Duration
	AtSizeRate float64 // samples/s of phase 2

	// Restart after SIGTERM with the same -storage.path: until /ready, and
	// until every tenant was opened again (one PushOne each, as tenants open
	// on first use) and the heads hold every series again.
	RestartReady, RestartReplayed time.Duration
	RestartHeadSeries             float64
	RestartPeakRSS                int64
	Err                           string

	// grow and more are the two topics replayed, kept so that a variant
	// of the same tenants and series in the other tenancy replays the
	// same records rather than producing them again.
	grow, more *backlog
}

// Variant names the variant's size, as the target rows do; the tenancy is
// in their label.
func (s *scaleResult) Variant() string {
	return fmt.Sprintf("%s tenant%s × %s series", fmtNum(float64(s.Tenants)), cond(s.Tenants == 1, "", "s"), fmtNum(float64(s.SeriesPerTenant)))
}

// label names the variant with its tenancy, for the scale table and the log.
func (s *scaleResult) label() string {
	return s.Variant() + cond(s.Shared, ", shared tenancy", "")
}

// reuseTopics takes the topics of an earlier variant of the same tenants,
// series and partitions (the other tenancy's), if it produced both: the
// two tenancies then replay the same records, and the run does not
// produce them twice.
func (s *scaleResult) reuseTopics(earlier []*scaleResult) {
	for _, o := range earlier {
		if o.grow != nil && o.more != nil && o.Tenants == s.Tenants && o.SeriesPerTenant == s.SeriesPerTenant && o.Partitions == s.Partitions {
			s.grow, s.more = o.grow, o.more
			return
		}
	}
}

func (s *scaleResult) bytesPerSeries() float64 {
	if s.Series == 0 {
		return 0
	}
	return float64(s.PeakRSS) / float64(s.Series)
}

// scaleVariants are the two ways of reaching n series: √n tenants of √n
// series (1,000 × 1,000 for a million), in the default tenancy and then in
// the shared one (next to it, so that the machine's drift during the run
// separates them least), and one tenant with all of them.
func scaleVariants(n int) []*scaleResult {
	t := max(1, int(math.Round(math.Sqrt(float64(n)))))
	return []*scaleResult{
		{Tenants: t, SeriesPerTenant: max(1, n/t), Partitions: 4},
		{Tenants: t, SeriesPerTenant: max(1, n/t), Partitions: 4, Shared: true, PusherArgs: []string{flagTenancyShared}},
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
	variants := scaleVariants(e.cfg.ScaleSeries)
	for i, v := range variants {
		if ctx.Err() != nil {
			break
		}
		v.reuseTopics(variants[:i])
		pause(ctx)
		e.scaleVariant(ctx, v)
		out = append(out, *v)
		e.logf("scale %s: %s per series (peak RSS %s), %.0f samples/s at size, restart: ready %s, replayed %s%s",
			v.label(), fmtPerSeries(v.bytesPerSeries()), fmtBytes(v.PeakRSS), v.AtSizeRate,
			fmtDur(v.RestartReady), fmtDur(v.RestartReplayed), cond(v.Err != "", " FAILED: "+v.Err, ""))
	}
	return out
}

// produceScale fills a fresh topic with passes [from, to) over the
// variant's series: tenants interleaved within a pass, passes one after
// another.
func (e *env) produceScale(ctx context.Context, v *scaleResult, name string, from, to int) (*backlog, error) {
	topic, err := e.createTopic(ctx, name, v.Partitions)
	if err != nil {
		return nil, err
	}
	recordsPerTenant := (v.SeriesPerTenant + scaleSeriesPerRecord - 1) / scaleSeriesPerRecord
	pass, k, t := from, 0, 0
	var marshalErr error
	start := time.Now()
	n, bytes, err := e.produceRecords(ctx, func() *kgo.Record {
		if pass == to || marshalErr != nil {
			return nil
		}
		tenant := loadgen.Tenant(t)
		val, err := scaleRequest(tenant, v.SeriesPerTenant, k, pass).Marshal()
		if err != nil {
			marshalErr = err
			return nil
		}
		r := &kgo.Record{Topic: topic, Partition: int32(t % v.Partitions), Key: []byte(tenant), Value: val} //nolint:gosec // small
		if t++; t == v.Tenants {
			t = 0
			if k++; k == recordsPerTenant {
				k, pass = 0, pass+1
			}
		}
		return r
	})
	if err = errors.Join(err, marshalErr); err != nil {
		return nil, err
	}
	return &backlog{Topic: topic, Records: n, Bytes: bytes, Samples: v.Series * int64(to-from), Took: time.Since(start),
		Shape: Shape{Partitions: v.Partitions, Tenants: v.Tenants, Series: min(v.SeriesPerTenant, scaleSeriesPerRecord), Records: int(n)}}, nil
}

// scaleVariant grows one pusher to the variant's series in two phases on
// the same running pusher: the first pass over every series (growth), then,
// once all of them exist and are committed, the remaining passes (the rate
// at that size). Then it restarts the pusher. It replays v.grow and v.more
// when set (another variant's topics), else produces them.
func (e *env) scaleVariant(ctx context.Context, v *scaleResult) {
	v.Series = int64(v.Tenants) * int64(v.SeriesPerTenant)
	v.AtSizeRate = math.NaN()
	name := fmt.Sprintf("scale-%dx%d", v.Tenants, v.SeriesPerTenant)
	if v.grow == nil || v.more == nil {
		e.logf("scale %s: producing %d passes over %d series", v.label(), scalePasses, v.Series)
		grow, err := e.produceScale(ctx, v, name+"-grow", 0, 1)
		if err != nil {
			v.Err = err.Error()
			return
		}
		more, err := e.produceScale(ctx, v, name+"-more", 1, scalePasses)
		if err != nil {
			v.Err = err.Error()
			return
		}
		v.grow, v.more = grow, more
	} else {
		e.logf("scale %s: replaying the topics of the same series in the other tenancy", v.label())
	}
	if v.Shared {
		name += "-shared"
	}
	grow, more := v.grow, v.more
	v.Backlog = &backlog{Records: grow.Records + more.Records, Bytes: grow.Bytes + more.Bytes, Samples: grow.Samples + more.Samples}
	dir, err := os.MkdirTemp(e.work, "tsdb-"+name+"-")
	if err != nil {
		v.Err = err.Error()
		return
	}
	args := append([]string{"-storage.path=" + dir}, v.PusherArgs...)
	p, err := e.startPusher(ctx, name+"-pusher", "tsdb", args...)
	if err != nil {
		v.Err = err.Error()
		return
	}
	defer func() { _ = p.stop(time.Second) }() // on the error paths; stopped below otherwise
	e.logf("scale %s: %d + %d records, %.0f MB; replaying into a tsdb pusher", v.label(), grow.Records, more.Records, float64(v.Backlog.Bytes)/1e6)
	// A million series through the TSDB take minutes on a busy 2-core
	// machine: three times -stage-timeout for each phase.
	o := pipelineOpts{backend: "tsdb", pusher: p, timeout: 3 * e.cfg.StageTimeout}
	v.Grow = e.runPipeline(ctx, grow, name+"-grow", o)
	if v.Grow.Err != "" {
		v.Err = "growing: " + v.Grow.Err
		return
	}
	v.GrowTime = v.Grow.Elapsed
	o.after = func(ctx context.Context, p *pusherProc) {
		if m, err := scrape(ctx, p.httpAddr); err == nil {
			v.HeadSeries = m.sum("ferry_pusher_tsdb_head_series_all_tenants", nil)
		}
	}
	v.Stage = e.runPipeline(ctx, more, name+"-more", o)
	if v.Stage.Err != "" {
		v.Err = v.Stage.Err
		return
	}
	v.AtSizeRate = v.Stage.samplesPerSec()
	v.PeakRSS = p.usage().PeakRSS
	// The restart: SIGTERM, then a new pusher on the same directory.
	if err := p.stop(40 * time.Second); err != nil {
		v.Err = "stopping the pusher: " + err.Error()
		return
	}
	if err := e.scaleRestart(ctx, v, name, args); err != nil {
		v.Err = "restart: " + err.Error()
	}
}

// scaleRestart starts a pusher on the variant's storage and times it until
// /ready and until every tenant's TSDB is open with all its series back in
// memory. Tenants open on first use, so one PushOne per tenant (a sample
// after the last pass) makes each replay its WAL. In the shared tenancy the
// tenants are one TSDB, which the pusher opens at start and replays before
// /ready: the ready time includes that replay, and the same loop then
// finds every tenant open.
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
	w("Each variant is %d passes over all its series, %d series per record with one sample each, 15 s apart, in two fresh topics (pass 1; the others), ", scalePasses, scaleSeriesPerRecord)
	w("replayed by one ferry-consumer per partition into a fresh tsdb pusher with default flags. ")
	w("Memory per series is the pusher's peak RSS (VmHWM: everything it holds) over the active series. ")
	w("Growth is phase 1, the first pass over every series into a fresh pusher (from starting the consumers to the group's final commit); once it is committed, the same pusher replays the other passes from a second topic (phase 2): its steady records/s, in samples, is the rate at that size. ")
	w("Restart: the pusher is stopped with SIGTERM once everything is committed, and started again on the same -storage.path; tenants open on first use, so the harness then sends one PushOne per tenant and the replay time ends when all are answered, with the heads' series counted.")
	if slices.ContainsFunc(r.Scale, func(s scaleResult) bool { return s.Shared }) {
		w(" The variant marked \"shared tenancy\" runs the pusher with `%s`: every tenant in one TSDB, each series labelled with its tenant, on the same records as the variant above it. ", flagTenancyShared)
		w("Its tenants are that one TSDB, which the pusher opens at start, replaying its one WAL (every tenant's series) before it reports ready: its \"every WAL replayed\" ends, as for the others, when every tenant's PushOne was answered, with the head's series counted, and its \"ready\" already includes the replay.")
	}
	w("\n\n")
	w("| variant | partitions | backlog | pusher peak RSS | per active series | head series | growth | samples/s at size | pusher CPU s / M samples | restart: ready | every WAL replayed | series after restart | peak RSS after restart | note |\n")
	w("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, s := range r.Scale {
		if !s.Stage.ok() || s.Backlog == nil {
			w("| %s | %d | | | | | | | | | | | | FAILED: %s |\n", s.label(), s.Partitions, oneLine(s.Err))
			continue
		}
		note := s.Stage.note()
		if len(s.PusherArgs) > 0 {
			note = fmt.Sprintf("pusher `%v`; %s", s.PusherArgs, note)
		}
		if s.Err != "" {
			note = "FAILED: " + s.Err + "; " + note
		}
		w("| %s | %d | %s records, %.0f MB | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.label(), s.Partitions,
			fmtNum(float64(s.Backlog.Records)), float64(s.Backlog.Bytes)/1e6, fmtBytes(s.PeakRSS), fmtPerSeries(s.bytesPerSeries()),
			fmtNum(s.HeadSeries), fmtDur(s.GrowTime), fmtNum(s.AtSizeRate), fmtCPU(s.Stage, s.Stage.PusherCPU),
			fmtDur(s.RestartReady), fmtDur(s.RestartReplayed), fmtNum(s.RestartHeadSeries), rssCell(s.RestartPeakRSS), oneLine(note))
	}
}

// fmtPerSeries prints bytes per series to a hundredth of a KiB: near the
// 4 KiB target, whole KiB would hide which side of it a run fell on.
func fmtPerSeries(b float64) string {
	if b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f KiB", b/1024)
}
