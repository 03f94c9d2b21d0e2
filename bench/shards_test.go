package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"
)

// TestEverySeriesOfAShardStaysOnOnePartition: at every size, each series
// is in exactly one record of a step, on partition series mod size, and
// every record holds the same number of series, so the sizes replay the
// same samples in records of the same size.
func TestEverySeriesOfAShardStaysOnOnePartition(t *testing.T) {
	for _, size := range []int{1, 2, 4} {
		parts, records := shardRecords(400, 100, size)
		if len(records) != 4 {
			t.Errorf("size %d: %d records a step, want 4", size, len(records))
		}
		seen := map[int]int{}
		for i, r := range records {
			if len(r) != 100 {
				t.Errorf("size %d: record %d holds %d series, want 100", size, i, len(r))
			}
			for _, s := range r {
				seen[s]++
				if int(parts[i]) != s%size {
					t.Errorf("size %d: series %d on partition %d, want %d", size, s, parts[i], s%size)
				}
			}
		}
		for s := range 400 {
			if seen[s] != 1 {
				t.Errorf("size %d: series %d in %d records of a step, want 1", size, s, seen[s])
			}
		}
	}
}

func shardRow(size int, backend string, samples int64, steady time.Duration) shardsResult {
	return shardsResult{Size: size, Backend: backend, Stage: stageResult{
		Records: samples / 100, Samples: samples, Elapsed: steady, SteadyRecords: samples / 100, Steady: steady,
	}}
}

// TestAShardSizeIsComparedToTheFirstSizeOfTheSameBackend: the ratio
// column divides by the base size's row of the same backend, and says
// n/a rather than a number when that row failed.
func TestAShardSizeIsComparedToTheFirstSizeOfTheSameBackend(t *testing.T) {
	rows := []shardsResult{
		shardRow(1, "discard", 1_000_000, time.Second),
		shardRow(1, "tsdb", 1_000_000, 2*time.Second),
		shardRow(2, "discard", 1_000_000, 500*time.Millisecond),
		shardRow(2, "tsdb", 1_000_000, 1600*time.Millisecond),
	}
	for _, c := range []struct {
		row  int
		want float64
	}{{0, 1}, {1, 1}, {2, 2}, {3, 1.25}} {
		if got := shardsRatio(rows, 1, rows[c.row]); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("row %d (%d, %s): ratio %g, want %g", c.row, rows[c.row].Size, rows[c.row].Backend, got, c.want)
		}
	}
	rows[1].Stage.Err = "pusher exited"
	if got := shardsRatio(rows, 1, rows[3]); !math.IsNaN(got) {
		t.Errorf("ratio to a failed base row: %g, want NaN", got)
	}
	r := &report{Shards: rows, cfg: Config{Shards: shardsConfig{Sizes: []int{1, 2}, Series: 400, SeriesPerRecord: 100, Records: 10_000}}}
	var b strings.Builder
	r.shards(func(format string, args ...any) { fmt.Fprintf(&b, format, args...) })
	for _, want := range []string{"| 2 | discard | 20,000 | 2,000,000 | 2.00 |", "| 2 | tsdb | 6,250 | 625,000 | n/a |", "| 1 | tsdb | | | | | | | | | | FAILED: pusher exited |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the shards table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestShardSizesMustSplitTheSeriesEvenly: a size whose partitions would
// carry records of different sizes is refused with the flag's name.
func TestShardSizesMustSplitTheSeriesEvenly(t *testing.T) {
	if _, err := parseFlags([]string{"-shards.sizes=1,3"}, io.Discard); err == nil || !strings.Contains(err.Error(), "-shards.series") {
		t.Errorf("-shards.sizes=1,3 with 4000 series of 100 a record: %v", err)
	}
	for _, bad := range [][]string{
		{"-shards.sizes=0"},
		{"-shards.sizes=32", "-shards.series=3200"}, // even, but above maxShardSize
		{"-shards.backends=remote-write"},
		{"-shards.records=0"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	c, err := parseFlags(nil, io.Discard)
	if err != nil || len(c.Shards.Sizes) != 3 || c.Shards.Sizes[2] != 4 || !c.Stages[stageShards] {
		t.Errorf("defaults: %+v, %v", c.Shards, err)
	}
}
