package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// The targets of issue 17 (performance, second round), checked on every
// run; the report says met or missed for each as computed here.
const (
	targetTSDBManyTenants = 0.40      // 1: pipeline(tsdb) / pipeline(discard), (4,1000,10)
	targetTSDBPusherRSS   = 400 << 20 // 1: pusher peak RSS, pipeline(tsdb), (4,1000,10)
	targetTSDBSyncMean    = 0.050     // 1: mean pusher Sync, seconds
	targetTSDBBigRecords  = 0.60      // 2: pipeline(tsdb) / pipeline(discard), (4,100,100)
	targetSmallRecords    = 0.80      // 3: pipeline(discard) / consume+decode, (4,1000,10), also by CPU
	targetLatencyOverKafk = 0.005     // 4: Ferry's p99 minus a plain consumer's p99, seconds
	targetPushOneCPU      = 1.5       // 5: PushOne's pusher CPU per sample / the stream's
	targetBytesPerSeries  = 4 << 10   // 6: pusher peak RSS / active series
	targetScaleSeries     = 1_000_000 // 6: the size the memory target is for
	targetReplayRSS       = 128 << 20 // 7: consumer peak RSS replaying 1 GiB
	targetReplayBytes     = 1 << 30

	shapeManyTenants = "4x1000x10"
	shapeBigRecords  = "4x100x100"
)

// targetRow is one line of the targets table.
type targetRow struct {
	Target   string
	Measured string
	Result   string
}

// fmtSpread prints a figure over rounds: the median, and the range when
// there was more than one round.
func fmtSpread(s spread, f func(float64) string) string {
	switch s.N {
	case 0:
		return "n/a"
	case 1:
		return f(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.Median), f(s.Min), f(s.Max))
}

func pctSpread(s spread) string { return fmtSpread(s, pct) }

// verdict is the result cell: pass or miss and by how much.
func verdict(ok bool, how string) string {
	if how == "" {
		return passMiss(ok)
	}
	return passMiss(ok) + " (" + how + ")"
}

func points(v, target float64) string { return fmt.Sprintf("%+.0f points", (v-target)*100) }

func (r *report) shape(name string) *shapeResult {
	for _, s := range r.Shapes {
		if s.Shape.Name() == name {
			return s
		}
	}
	return nil
}

// targetRows evaluates every target of issue 17 on what the run measured.
func (r *report) targetRows() []targetRow {
	var rows []targetRow
	add := func(target, measured, result string) { rows = append(rows, targetRow{target, measured, result}) }
	notMeasured := func(target string) { add(target, "not measured", "**miss**") }
	ratioRow := func(label, shape, a, b string, target float64, cpuToo bool) {
		name := fmt.Sprintf("%s %s ≥ %.0f%% of %s, %s", label, a, target*100, b, labelOf(shape))
		if cpuToo {
			name += ", by throughput and by CPU"
		}
		s := r.shape(shape)
		if s == nil {
			notMeasured(name)
			return
		}
		t, c := summarize(s.ratios(a, b, false)), summarize(s.ratios(a, b, true))
		if t.N == 0 {
			add(name, s.notMeasured(a, b), "**miss**")
			return
		}
		ok := t.Median >= target
		if cpuToo {
			ok = ok && c.Median >= target
		}
		add(name, fmt.Sprintf("%s; by CPU %s (%s)", pctSpread(t), pctSpread(c), roundsText(t.N)),
			verdict(ok, points(math.Min(t.Median, cond(cpuToo, c.Median, t.Median)), target)))
	}
	// memoryRows are target 1's pusher peak RSS and mean Sync of a TSDB
	// stage at (4,1000,10).
	memoryRows := func(label, stage string) {
		s := r.shape(shapeManyTenants)
		if s == nil {
			notMeasured(fmt.Sprintf("%s pusher peak RSS and mean Sync, %s, %s", label, stage, labelOf(shapeManyTenants)))
			return
		}
		rss := summarize(s.each(stage, func(st stageResult) float64 { return float64(st.PusherPeakRSS) }))
		name := fmt.Sprintf("%s pusher peak RSS ≤ %s, %s, %s", label, fmtBytes(targetTSDBPusherRSS), stage, labelOf(shapeManyTenants))
		if rss.N == 0 {
			add(name, s.notMeasured(stage), "**miss**")
		} else {
			add(name, fmtSpread(rss, func(f float64) string { return fmtBytes(int64(f)) }),
				verdict(rss.Median <= targetTSDBPusherRSS, fmt.Sprintf("%.1f× the target", rss.Median/targetTSDBPusherRSS)))
		}
		sync := summarize(s.each(stage, func(st stageResult) float64 {
			return cond(st.Syncs > 0, st.SyncMean, math.NaN())
		}))
		name = fmt.Sprintf("%s mean pusher Sync ≤ %s, %s, %s", label, fmtSeconds(targetTSDBSyncMean), stage, labelOf(shapeManyTenants))
		if sync.N == 0 {
			add(name, s.notMeasured(stage), "**miss**")
		} else {
			add(name, fmtSpread(sync, fmtSeconds), verdict(sync.Median <= targetTSDBSyncMean, fmt.Sprintf("%.1f× the target", sync.Median/targetTSDBSyncMean)))
		}
	}
	// Targets 1 and 2 are judged twice: as issue 17 set them, on the
	// pusher's default tenancy (a TSDB per tenant), and on the shared
	// tenancy (one TSDB for every tenant), with the same thresholds.
	ratioRow("1.", shapeManyTenants, stagePipelineTSDB, stagePipelineDiscard, targetTSDBManyTenants, false)
	memoryRows("1.", stagePipelineTSDB)
	ratioRow(sharedLabel(1), shapeManyTenants, stagePipelineShared, stagePipelineDiscard, targetTSDBManyTenants, false)
	memoryRows(sharedLabel(1), stagePipelineShared)
	ratioRow("2.", shapeBigRecords, stagePipelineTSDB, stagePipelineDiscard, targetTSDBBigRecords, false)
	ratioRow(sharedLabel(2), shapeBigRecords, stagePipelineShared, stagePipelineDiscard, targetTSDBBigRecords, false)
	ratioRow("3.", shapeManyTenants, stagePipelineDiscard, stageDecode, targetSmallRecords, true)

	for _, l := range r.Latency {
		name := fmt.Sprintf("4. produce→ack p99 ≤ a plain consumer's p99 + %s at %.0f%% of capacity, %s",
			fmtSeconds(targetLatencyOverKafk), 100*l.Fraction, l.Shape.Label())
		if l.Err != "" || math.IsNaN(l.P99) || l.KafkaFetch.N == 0 {
			notMeasured(name)
			continue
		}
		over := l.P99 - l.KafkaFetch.P99.Seconds()
		add(name, fmt.Sprintf("Ferry p99 %s (bucket %s–%s), plain consumer p99 %s, at %s records/s", fmtSeconds(l.P99),
			fmtSeconds(l.P99Lo), fmtSeconds(l.P99Hi), fmtSeconds(l.KafkaFetch.P99.Seconds()), fmtNum(l.Rate)),
			verdict(over <= targetLatencyOverKafk, fmt.Sprintf("%s above the plain consumer", fmtSignedSeconds(over))))
	}
	if len(r.Latency) == 0 {
		notMeasured("4. produce→ack p99 ≤ a plain consumer's p99 + 5 ms at 25% and 50% of capacity")
	}

	r.perShapeRow(&rows, fmt.Sprintf("5. PushOne: pusher CPU per sample ≤ %.1f× the stream's (simple loop vs pipeline(discard))", targetPushOneCPU),
		func(s *shapeResult) spread { return summarize(pushOneCPURatios(s)) },
		func(sp spread) string { return fmtSpread(sp, times) },
		func(worst float64) bool { return worst <= targetPushOneCPU }, true)

	// Target 6 on the default tenancy, every variant, then on the shared
	// tenancy (its one variant, 1,000 tenants), as targets 1 and 2 are.
	for _, shared := range []bool{false, true} {
		for _, sc := range r.Scale {
			if sc.Shared != shared {
				continue
			}
			label := cond(shared, sharedLabel(6), "6.")
			name := fmt.Sprintf("%s pusher memory per active series ≤ %s, %s", label, fmtBytes(targetBytesPerSeries), sc.Variant())
			if !sc.Stage.ok() || sc.PeakRSS <= 0 {
				notMeasured(name)
				continue
			}
			how := fmt.Sprintf("%.2f× the target", sc.bytesPerSeries()/targetBytesPerSeries)
			res := verdict(sc.bytesPerSeries() <= targetBytesPerSeries, how)
			if sc.Series < targetScaleSeries {
				res = "not evaluated (scaled down: " + how + ")"
			}
			// The shared tenancy has one WAL for every tenant.
			replayed := cond(shared, "the shared TSDB's WAL", "every WAL")
			add(name, fmt.Sprintf("%s per series (pusher peak RSS %s / %s series); at that size %s samples/s; restart: ready after %s, %s replayed after %s",
				fmtPerSeries(sc.bytesPerSeries()), fmtBytes(sc.PeakRSS), fmtNum(float64(sc.Series)), fmtNum(sc.AtSizeRate),
				fmtDur(sc.RestartReady), replayed, fmtDur(sc.RestartReplayed))+cond(sc.Err != "", "; "+sc.Err, ""), res)
		}
	}
	if len(r.Scale) == 0 {
		notMeasured("6. pusher memory per active series ≤ 4 KiB at 1,000,000 series")
		notMeasured(sharedLabel(6) + " pusher memory per active series ≤ 4 KiB at 1,000,000 series, 1,000 tenants × 1,000 series")
	}

	if rp := r.Replay; rp != nil && rp.Err == "" && rp.Backlog != nil {
		name := fmt.Sprintf("7. consumer peak RSS ≤ %s replaying 1 GiB, default flags", fmtBytes(targetReplayRSS))
		rss := rp.Stage.ConsumerPeakRSS
		res := verdict(rss <= targetReplayRSS, byHowMuch(float64(rss), targetReplayRSS, func(f float64) string { return fmtBytes(int64(f)) }))
		if rp.Backlog.Bytes < targetReplayBytes {
			res = "not evaluated (scaled down: " + fmtBytes(rp.Backlog.Bytes) + " backlog)"
		}
		add(name, fmtBytes(rss), res)
	} else {
		notMeasured(fmt.Sprintf("7. consumer peak RSS ≤ %s replaying 1 GiB, default flags", fmtBytes(targetReplayRSS)))
	}

	r.perShapeRow(&rows, "8. reference: pipeline(discard) records/s over a simple franz-go loop calling PushOne per record",
		func(s *shapeResult) spread { return summarize(s.ratios(stagePipelineDiscard, stageSimpleLoop, false)) },
		func(sp spread) string { return fmtSpread(sp, times) },
		func(float64) bool { return true }, false)

	if f := r.Fairness; f != nil {
		name := "no stall of other tenants while one is retried (round 1), " + f.Shape.Label()
		if f.Err != "" {
			notMeasured(name)
		} else {
			ok := f.StallBuckets == 0
			how := fmt.Sprintf("no %s bucket without progress", f.Bucket)
			if !ok {
				how = fmt.Sprintf("stalled %s after the fault began, %s without progress in all",
					f.StallAfter, time.Duration(f.StallBuckets)*f.Bucket)
			}
			add(name, fmt.Sprintf("others on %s's partition: %s records/s during the fault vs %s without (%s of the fault-free rate, %s after correcting by the other partitions' change)",
				f.FaultTenant, fmtNum(f.SameFaulted), fmtNum(f.SameBaseline), pct(f.SameFaulted/f.SameBaseline), pct(f.normalized())), verdict(ok, how))
		}
	}
	return rows
}

// sharedLabel is the number of a target row judged on the shared tenancy.
func sharedLabel(n int) string { return fmt.Sprintf("%d (shared tenancy).", n) }

// notMeasured is the measured cell of a target row none of whose rounds
// could be judged: with the first error of the named stages, so that a
// stage that failed (a pusher refusing a flag) says why in the row.
func (r *shapeResult) notMeasured(stages ...string) string {
	for _, name := range stages {
		for _, s := range r.Stages {
			if s.Stage == name && s.Err != "" {
				return fmt.Sprintf("not measured: %s failed: %s", name, s.Err)
			}
		}
	}
	return "not measured"
}

// perShapeRow adds one row for a figure measured on every shape: the
// measured cell lists each shape, and ok judges the worst (largest) median.
// A reference row (judged false) says "measured" instead of pass or miss.
func (r *report) perShapeRow(rows *[]targetRow, name string, get func(*shapeResult) spread, show func(spread) string,
	ok func(worst float64) bool, judged bool,
) {
	var parts []string
	worst, n := math.Inf(-1), 0
	for _, s := range r.Shapes {
		sp := get(s)
		if sp.N == 0 {
			parts = append(parts, s.Shape.Label()+" n/a")
			continue
		}
		n++
		worst = math.Max(worst, sp.Median)
		parts = append(parts, s.Shape.Label()+" "+show(sp))
	}
	row := targetRow{Target: name, Measured: strings.Join(parts, "; ")}
	switch {
	case n == 0 || n < len(r.Shapes):
		row.Result = "**miss** (not measured on every shape)"
		if row.Measured == "" {
			row.Measured = "not measured"
		}
	case !judged:
		row.Result = "**measured**"
	default:
		row.Result = verdict(ok(worst), fmt.Sprintf("worst %s", times(worst)))
	}
	*rows = append(*rows, row)
}

// pushOneCPURatios is, per round, the pusher's CPU per sample serving the
// simple loop's PushOne calls over its CPU per sample serving the
// pipeline(discard) streams: target 5.
func pushOneCPURatios(s *shapeResult) []float64 {
	var out []float64
	for round := 1; round <= max(1, s.rounds()); round++ {
		one, ok1 := s.inRound(round, stageSimpleLoop)
		stream, ok2 := s.inRound(round, stagePipelineDiscard)
		if ok1 && ok2 {
			out = append(out, one.cpuPerMSamples(one.PusherCPU)/stream.cpuPerMSamples(stream.PusherCPU))
		}
	}
	return out
}

func (r *report) targets(w writer) {
	w("\n### Targets (issue 17)\n\n")
	if r.cfg.Quick {
		w("A `-quick` run: backlogs, rounds and sizes are too small for the targets; the verdicts only show the harness works.\n\n")
	}
	w("Ratios are the median over the rounds with the range (min–max) in brackets; \"by CPU\" is the ratio predicted by CPU seconds per sample of every process involved.\n\n")
	w("Rows marked \"shared tenancy\" judge targets 1 and 2 again, with the same thresholds, on pipeline(tsdb, shared): the pusher run with `%s`, which keeps every tenant in one TSDB, each series labelled with its tenant. ", flagTenancyShared)
	w("The other rows measure the default, `-storage.tenancy=separate`: a TSDB per tenant. ")
	w("The row \"6 (shared tenancy)\" judges target 6 with the same threshold on the scale stage's many-tenant variant run with that flag; one tenant is one TSDB in either tenancy, so the one-tenant variant is not repeated.\n\n")
	w("| target | measured | result |\n|---|---|---|\n")
	for _, row := range r.targetRows() {
		w("| %s | %s | %s |\n", row.Target, oneLine(row.Measured), row.Result)
	}
}

// byHowMuch says how far v is from a ceiling target.
func byHowMuch(v, target float64, f func(float64) string) string {
	if v <= target {
		return fmt.Sprintf("%s below", f(target-v))
	}
	return fmt.Sprintf("%s over, %.1f× the target", f(v-target), v/target)
}

// roundsText says what a figure over rounds is.
func roundsText(n int) string {
	if n == 1 {
		return "1 round"
	}
	return fmt.Sprintf("median of %d rounds, range in brackets", n)
}

func labelOf(name string) string { return "(" + strings.ReplaceAll(name, "x", ",") + ")" }

func times(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f×", f)
}

func fmtSignedSeconds(s float64) string {
	if s < 0 {
		return "−" + fmtSeconds(-s)
	}
	return "+" + fmtSeconds(s)
}

func fmtDur(d time.Duration) string {
	if d <= 0 {
		return "n/a"
	}
	return fmtSeconds(d.Seconds())
}

func cond[T any](c bool, a, b T) T {
	if c {
		return a
	}
	return b
}
