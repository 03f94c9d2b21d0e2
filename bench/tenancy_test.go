package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSharedTenancyRunsNextToTSDBOnTheShapesOfTargets1And2(t *testing.T) {
	names := func(plan []plannedStage) []string {
		var out []string
		for _, p := range plan {
			out = append(out, p.Stage)
		}
		return out
	}
	for _, name := range []string{shapeManyTenants, shapeBigRecords} {
		sh, err := parseShape(name + ":1000")
		if err != nil {
			t.Fatal(err)
		}
		got := names(shapePlan(sh, 3))
		want := []string{stageConsume,
			stageDecode, stagePipelineDiscard, stagePipelineTSDB, stagePipelineShared, stageSimpleLoop,
			stagePipelineShared, stagePipelineTSDB, stagePipelineDiscard, stageDecode,
			stageDecode, stagePipelineDiscard, stagePipelineTSDB, stagePipelineShared}
		if !slices.Equal(got, want) {
			t.Errorf("%s: plan\n%q\nwant\n%q", name, got, want)
		}
	}
	// Other shapes keep the plan they had: no shared tenancy.
	got := names(shapePlan(Shape{Partitions: 1, Tenants: 1, Series: 100, Records: 1000}, 2))
	want := []string{stageConsume, stageDecode, stagePipelineDiscard, stagePipelineTSDB, stageSimpleLoop,
		stagePipelineTSDB, stagePipelineDiscard, stageDecode}
	if !slices.Equal(got, want) {
		t.Errorf("(1,1,100): plan %q, want %q", got, want)
	}
	for _, p := range shapePlan(Shape{Partitions: 4, Tenants: 1000, Series: 10}, 2) {
		if p.Stage == stagePipelineShared && p.Round == 0 {
			t.Error("pipeline(tsdb, shared) planned outside the rounds")
		}
	}
}

// sharedRun is a report of both target shapes with pipeline(tsdb) and
// pipeline(tsdb, shared) over three rounds; the shared stage of
// (4,100,100) failed in every round, as with a pusher that refuses the
// flag.
func sharedRun() *report {
	many := &shapeResult{Shape: Shape{Partitions: 4, Tenants: 1000, Series: 10, Records: 1000}, Backlog: &backlog{Records: 1000, Bytes: 1e6}}
	big := &shapeResult{Shape: Shape{Partitions: 4, Tenants: 100, Series: 100, Records: 1000}, Backlog: &backlog{Records: 1000, Bytes: 1e6}}
	refused := "tsdb-shared-4x100x100-r1-pusher refused its command line (exit status 2): \"ferry-pusher: flag provided but not defined: -storage.tenancy\"; flags beyond the harness's own: -storage.tenancy=shared (is the binary older?)"
	for round := 1; round <= 3; round++ {
		tsdb := stageAt(stagePipelineTSDB, round, 300, 3)
		tsdb.PusherPeakRSS, tsdb.Syncs, tsdb.SyncMean = 800<<20, 10, 0.2
		// Shared: 400, 450 and 500 records/s over a discard pipeline of
		// 1,000; 300, 350 and 500 MiB; Syncs of 20, 30 and 90 ms.
		shared := stageAt(stagePipelineShared, round, 350+50*float64(round), 2)
		shared.PusherPeakRSS = []int64{300 << 20, 500 << 20, 350 << 20}[round-1]
		shared.Syncs, shared.SyncMean = 10, []float64{0.02, 0.09, 0.03}[round-1]
		many.Stages = append(many.Stages, stageAt(stageDecode, round, 2000, 1), stageAt(stagePipelineDiscard, round, 1000, 1), tsdb, shared)
		bigShared := stageResult{Stage: stagePipelineShared, Round: round, Err: refused}
		big.Stages = append(big.Stages, stageAt(stageDecode, round, 2000, 1), stageAt(stagePipelineDiscard, round, 1000, 1),
			stageAt(stagePipelineTSDB, round, 500, 2), bigShared)
	}
	return &report{Shapes: []*shapeResult{many, big}, cfg: Config{Rounds: 3}}
}

func TestSharedTenancyTargetRowsAreJudgedLikeTheDefaultOnes(t *testing.T) {
	rep := sharedRun()
	var rows []string
	for _, row := range rep.targetRows() {
		rows = append(rows, "| "+row.Target+" | "+oneLine(row.Measured)+" | "+row.Result+" |")
	}
	want := []string{
		"| 1. pipeline(tsdb) ≥ 40% of pipeline(discard), (4,1000,10) | 30% (30%–30%); by CPU 33% (33%–33%) (median of 3 rounds, range in brackets) | **miss** (-10 points) |",
		"| 1. pusher peak RSS ≤ 400 MiB, pipeline(tsdb), (4,1000,10) | 800 MiB (800 MiB–800 MiB) | **miss** (2.0× the target) |",
		"| 1. mean pusher Sync ≤ 50.0 ms, pipeline(tsdb), (4,1000,10) | 200.0 ms (200.0 ms–200.0 ms) | **miss** (4.0× the target) |",
		// CPU: 3 s per 1,000 samples against the discard pipeline's 1.5 s.
		"| 1 (shared tenancy). pipeline(tsdb, shared) ≥ 40% of pipeline(discard), (4,1000,10) | 45% (40%–50%); by CPU 50% (50%–50%) (median of 3 rounds, range in brackets) | **pass** (+5 points) |",
		"| 1 (shared tenancy). pusher peak RSS ≤ 400 MiB, pipeline(tsdb, shared), (4,1000,10) | 350 MiB (300 MiB–500 MiB) | **pass** (0.9× the target) |",
		"| 1 (shared tenancy). mean pusher Sync ≤ 50.0 ms, pipeline(tsdb, shared), (4,1000,10) | 30.0 ms (20.0 ms–90.0 ms) | **pass** (0.6× the target) |",
		"| 2. pipeline(tsdb) ≥ 60% of pipeline(discard), (4,100,100) | 50% (50%–50%); by CPU 50% (50%–50%) (median of 3 rounds, range in brackets) | **miss** (-10 points) |",
		"| 2 (shared tenancy). pipeline(tsdb, shared) ≥ 60% of pipeline(discard), (4,100,100) | not measured: pipeline(tsdb, shared) failed: tsdb-shared-4x100x100-r1-pusher refused its command line (exit status 2): \"ferry-pusher: flag provided but not defined: -storage.tenancy\"; flags beyond the harness's own: -storage.tenancy=shared (is the binary older?) | **miss** |",
	}
	if len(rows) < len(want) || !slices.Equal(rows[:len(want)], want) {
		t.Errorf("rows of targets 1 and 2:\n%s\nwant\n%s", strings.Join(rows[:min(len(rows), len(want))], "\n"), strings.Join(want, "\n"))
	}
	md := rep.markdown()
	for _, s := range []string{
		// The stage's own row, with the figures pipeline(tsdb) has.
		"| (4,1000,10) | pipeline(tsdb, shared) #2 | 450 |",
		"| (4,100,100) | pipeline(tsdb, shared) #1 | | | | | | | | | | | FAILED: tsdb-shared-4x100x100-r1-pusher refused",
		// What the shared tenancy is, said where the rows are.
		"Rows marked \"shared tenancy\" judge targets 1 and 2 again, with the same thresholds, on pipeline(tsdb, shared): the pusher run with `-storage.tenancy=shared`, which keeps every tenant in one TSDB, each series labelled with its tenant. The other rows measure the default, `-storage.tenancy=separate`: a TSDB per tenant.",
		"pipeline(tsdb, shared) = 4 with `-storage.tenancy=shared` added to the pusher's flags: one TSDB for every tenant",
		// The ratio table: 4s, 4s/3, 4s/3 by CPU, 4s/4.
		"| 300 (300–300) | 450 (400–500) | n/a | 50% (50%–50%) | 100% (100%–100%) | 30% (30%–30%) | 33% (33%–33%) | 45% (40%–50%) | 50% (50%–50%) | 150% (133%–167%) | 15% (15%–15%) |",
		// Failed in every round: its columns say n/a, not –.
		"| 500 (500–500) | n/a | n/a | 50% (50%–50%) | 100% (100%–100%) | 50% (50%–50%) | 50% (50%–50%) | n/a | n/a | n/a | 25% (25%–25%) |",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("report lacks %q", s)
		}
	}
}

func TestSharedTenancyColumnsAreEmptyWhereItDoesNotRun(t *testing.T) {
	one := &shapeResult{Shape: Shape{Partitions: 1, Tenants: 1, Series: 100, Records: 1000}, Backlog: &backlog{Records: 1000, Bytes: 1e6}, Stages: []stageResult{
		stageAt(stageDecode, 1, 2000, 1), stageAt(stagePipelineDiscard, 1, 1000, 1), stageAt(stagePipelineTSDB, 1, 500, 2),
	}}
	md := (&report{Shapes: []*shapeResult{one}, cfg: Config{Rounds: 1}}).markdown()
	if !strings.Contains(md, "| 2,000 | 1,000 | 500 | – | n/a | 50% | 100% | 50% | 50% | – | – | – | 25% |") {
		t.Errorf("ratio table of a shape without the shared tenancy:\n%s", md)
	}
}

func TestAPusherThatRefusesAFlagFailsAtOnceNamingIt(t *testing.T) {
	dir := t.TempDir()
	// What a ferry-pusher built before -storage.tenancy does with it: the
	// flag package's message and usage, then the command's last word,
	// exit status 2 (internal/cli).
	bin := filepath.Join(dir, "ferry-pusher")
	script := "#!/bin/sh\necho started >> " + filepath.Join(dir, "starts") + "\n" +
		"echo 'flag provided but not defined: -storage.tenancy' >&2\necho 'Usage of ferry-pusher:' >&2\n" +
		"echo '  -storage.path string' >&2\necho 'ferry-pusher: flag provided but not defined: -storage.tenancy' >&2\nexit 2\n"
	if err := os.WriteFile(bin, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	e := &env{work: dir, logDir: dir, pusherBin: bin, kafkaSide: &kafkaSide{}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := e.startPusher(ctx, "tsdb-shared-pusher", "tsdb", flagTenancyShared)
	if err == nil {
		t.Fatal("a pusher that exited with status 2 was taken as started")
	}
	for _, s := range []string{
		`tsdb-shared-pusher refused its command line (exit status 2): "ferry-pusher: flag provided but not defined: -storage.tenancy"`,
		"flags beyond the harness's own: -storage.tenancy=shared",
	} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
	if len(oneLine(err.Error())) > 300 {
		t.Errorf("error of %d characters is cut in the table: %q", len(err.Error()), err)
	}
	// A command line refused once is refused again: no second attempt.
	if b, err := os.ReadFile(filepath.Join(dir, "starts")); err != nil || strings.Count(string(b), "started") != 1 {
		t.Errorf("the pusher was started %d times, want once (%v)", strings.Count(string(b), "started"), err)
	}
}

func TestScaleRunsTheManyTenantVariantAgainInTheSharedTenancy(t *testing.T) {
	var got []string
	for _, v := range scaleVariants(1_000_000) {
		got = append(got, fmt.Sprintf("%s on %d partitions, pusher %q", v.label(), v.Partitions, v.PusherArgs))
	}
	want := []string{
		`1,000 tenants × 1,000 series on 4 partitions, pusher []`,
		`1,000 tenants × 1,000 series, shared tenancy on 4 partitions, pusher ["-storage.tenancy=shared"]`,
		`1 tenant × 1,000,000 series on 1 partitions, pusher ["-limits.max-series-per-tenant=0"]`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("variants\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestTheSharedScaleVariantReplaysTheTopicsOfTheSeparateOne(t *testing.T) {
	v := scaleVariants(1_000_000)
	grow, more := &backlog{Topic: "grow"}, &backlog{Topic: "more"}
	v[0].grow, v[0].more = grow, more
	v[1].reuseTopics(v[:1])
	if v[1].grow != grow || v[1].more != more {
		t.Errorf("shared variant replays %+v and %+v, not the separate variant's topics", v[1].grow, v[1].more)
	}
	// Other series, or a variant that did not produce both topics, give
	// nothing: the variant produces its own.
	v[2].reuseTopics(v[:2])
	if v[2].grow != nil || v[2].more != nil {
		t.Errorf("1 tenant × 1,000,000 series took another variant's topics")
	}
	fresh := scaleVariants(1_000_000)
	fresh[0].grow = grow
	fresh[1].reuseTopics(fresh[:1])
	if fresh[1].grow != nil {
		t.Error("took the topics of a variant that failed before producing its second one")
	}
}

// scaleRun is a report of the scale stage with all three variants: the
// shared tenancy holds 1,000 tenants × 1,000 series in a third of the
// separate tenancy's memory and replays its WAL faster.
func scaleRun() *report {
	v := scaleVariants(1_000_000)
	for i, peak := range []int64{3 << 30, 1 << 30, 5 << 30} {
		s := v[i]
		s.Series = int64(s.Tenants) * int64(s.SeriesPerTenant)
		s.Backlog = &backlog{Records: 3000, Bytes: 278e6}
		s.Stage = stageResult{Elapsed: time.Second}
		s.PeakRSS, s.HeadSeries, s.RestartHeadSeries, s.RestartPeakRSS = peak, 1e6, 1e6, peak/2
		s.GrowTime, s.AtSizeRate = 5*time.Second, 700_000+100_000*float64(i)
		s.RestartReady, s.RestartReplayed = 20*time.Millisecond, time.Duration(2500-1000*i)*time.Millisecond
	}
	return &report{cfg: Config{ScaleSeries: 1_000_000}, Scale: []scaleResult{*v[0], *v[1], *v[2]}}
}

func TestSharedTenancyScaleRowIsJudgedLikeTheOthers(t *testing.T) {
	rep := scaleRun()
	var rows []string
	for _, row := range rep.targetRows() {
		if strings.HasPrefix(row.Target, "6") || strings.HasPrefix(row.Target, "7") {
			rows = append(rows, "| "+row.Target+" | "+oneLine(row.Measured)+" | "+row.Result+" |")
		}
	}
	want := []string{
		"| 6. pusher memory per active series ≤ 4 KiB, 1,000 tenants × 1,000 series | 3.15 KiB per series (pusher peak RSS 3.00 GiB / 1,000,000 series); at that size 700,000 samples/s; restart: ready after 20.0 ms, every WAL replayed after 2.50 s | **pass** (0.79× the target) |",
		"| 6. pusher memory per active series ≤ 4 KiB, 1 tenant × 1,000,000 series | 5.24 KiB per series (pusher peak RSS 5.00 GiB / 1,000,000 series); at that size 900,000 samples/s; restart: ready after 20.0 ms, every WAL replayed after 500.0 ms | **miss** (1.31× the target) |",
		// Right after the rows of the default tenancy; one WAL to replay.
		"| 6 (shared tenancy). pusher memory per active series ≤ 4 KiB, 1,000 tenants × 1,000 series | 1.05 KiB per series (pusher peak RSS 1.00 GiB / 1,000,000 series); at that size 800,000 samples/s; restart: ready after 20.0 ms, the shared TSDB's WAL replayed after 1.50 s | **pass** (0.26× the target) |",
		"| 7. consumer peak RSS ≤ 128 MiB replaying 1 GiB, default flags | not measured | **miss** |",
	}
	if !slices.Equal(rows, want) {
		t.Errorf("rows of targets 6 and 7:\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	md := rep.markdown()
	for _, s := range []string{
		// Each variant's own row in the scale table, in the order they ran.
		"| 1,000 tenants × 1,000 series | 4 | 3,000 records, 278 MB | 3.00 GiB | 3.15 KiB | 1,000,000 | 5.00 s | 700,000 |",
		"| 1,000 tenants × 1,000 series, shared tenancy | 4 | 3,000 records, 278 MB | 1.00 GiB | 1.05 KiB | 1,000,000 | 5.00 s | 800,000 | – | 20.0 ms | 1.50 s | 1,000,000 | 512 MiB | pusher `[-storage.tenancy=shared]`; ",
		"| 1 tenant × 1,000,000 series | 1 | 3,000 records, 278 MB | 5.00 GiB | 5.24 KiB | 1,000,000 | 5.00 s | 900,000 |",
		// What the shared variant's replay time is.
		"The variant marked \"shared tenancy\" runs the pusher with `-storage.tenancy=shared`: every tenant in one TSDB, each series labelled with its tenant, on the same records as the variant above it. " +
			"Its tenants are that one TSDB, which the pusher opens at start, replaying its one WAL (every tenant's series) before it reports ready: " +
			"its \"every WAL replayed\" ends, as for the others, when every tenant's PushOne was answered, with the head's series counted, and its \"ready\" already includes the replay.",
		"The row \"6 (shared tenancy)\" judges target 6 with the same threshold on the scale stage's many-tenant variant run with that flag; one tenant is one TSDB in either tenancy, so the one-tenant variant is not repeated.",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("report lacks %q", s)
		}
	}
	i, j := strings.Index(md, "| 1,000 tenants × 1,000 series | 4 |"), strings.Index(md, "| 1,000 tenants × 1,000 series, shared tenancy | 4 |")
	if k := strings.Index(md, "| 1 tenant × 1,000,000 series | 1 |"); i < 0 || j < i || k < j {
		t.Errorf("scale table rows at %d, %d, %d: want separate, shared, one tenant", i, j, k)
	}

	// Without the shared variant (a run of the commit before it, or one
	// that was interrupted) the table says nothing about it.
	rep.Scale = []scaleResult{rep.Scale[0], rep.Scale[2]}
	if md := rep.markdown(); strings.Contains(md, "The variant marked \"shared tenancy\"") || strings.Contains(md, "6 (shared tenancy). pusher") {
		t.Error("report describes a shared scale variant it did not run")
	}
	// A run without the scale stage misses both tenancies' target 6.
	rep.Scale = nil
	var missed []string
	for _, row := range rep.targetRows() {
		if strings.HasPrefix(row.Target, "6") {
			missed = append(missed, row.Target+" | "+row.Measured+" | "+row.Result)
		}
	}
	if want := []string{
		"6. pusher memory per active series ≤ 4 KiB at 1,000,000 series | not measured | **miss**",
		"6 (shared tenancy). pusher memory per active series ≤ 4 KiB at 1,000,000 series, 1,000 tenants × 1,000 series | not measured | **miss**",
	}; !slices.Equal(missed, want) {
		t.Errorf("rows of target 6 without the scale stage: %q", missed)
	}
}
