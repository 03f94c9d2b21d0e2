package consumer

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestWatermarkMovesOnlyOverAFinishedPrefix(t *testing.T) {
	tr := newTracker(map[int32]int64{0: 10})
	for _, o := range []int64{10, 11, 13, 14} { // 12 is a gap: compacted away
		if err := tr.add(0, o, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		finish int64
		want   int64
	}{
		{11, 10}, // 10 still pending
		{14, 10},
		{10, 12}, // 10 and 11 done: next to read is 12
		{13, 15}, // the gap at 12 is skipped: 13 and 14 done
	}
	for _, s := range steps {
		tr.finish(0, s.finish)
		if got := tr.watermarks()[0]; got != s.want {
			t.Fatalf("after finishing %d the watermark is %d, want %d", s.finish, got, s.want)
		}
	}
	if n := tr.pending(); n != 0 {
		t.Fatalf("pending = %d, want 0", n)
	}
}

func TestTrackerRefusesForeignAndRepeatedOffsets(t *testing.T) {
	tr := newTracker(map[int32]int64{1: 0})
	if err := tr.add(2, 0, time.Time{}); err == nil {
		t.Error("add for a partition not owned: want an error")
	}
	if tr.owns(2) || !tr.owns(1) {
		t.Error("owns is wrong")
	}
	if err := tr.add(1, 5, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := tr.add(1, 5, time.Time{}); err == nil {
		t.Error("adding offset 5 twice: want an error")
	}
	if err := tr.add(1, 3, time.Time{}); err == nil {
		t.Error("adding offset 3 after 5: want an error")
	}
}

func TestTrackerRandomFinishOrder(t *testing.T) {
	const n = 5000
	tr := newTracker(map[int32]int64{0: 0})
	for o := range int64(n) {
		if err := tr.add(0, o, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	order := rand.Perm(n)
	finished := make([]bool, n)
	for _, o := range order {
		tr.finish(0, int64(o))
		finished[o] = true
		want := int64(0)
		for want < n && finished[want] {
			want++
		}
		if got := tr.watermarks()[0]; got != want {
			t.Fatalf("watermark %d, want %d", got, want)
		}
	}
}

// BenchmarkTracker measures add+finish of one record with 256 in flight,
// finished out of order as tenants would.
func BenchmarkTracker(b *testing.B) {
	tr := newTracker(map[int32]int64{0: 0})
	const inflight = 256
	var next int64
	pending := make([]int64, 0, inflight)
	for b.Loop() {
		if err := tr.add(0, next, time.Time{}); err != nil {
			b.Fatal(err)
		}
		pending = append(pending, next)
		next++
		if len(pending) == inflight {
			i := rand.IntN(len(pending))
			tr.finish(0, pending[i])
			pending[i] = pending[len(pending)-1]
			pending = pending[:len(pending)-1]
		}
	}
}

func TestOldestIsTheTimestampOfTheFirstUnfinishedRecord(t *testing.T) {
	t.Parallel()
	base := time.Unix(1_700_000_000, 0)
	tr := newTracker(map[int32]int64{0: 10, 1: 0})
	for o := int64(10); o < 13; o++ {
		if err := tr.add(0, o, base.Add(time.Duration(o)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		finish int64
		want   time.Time
	}{
		{11, base.Add(10 * time.Second)}, // 10 still waits
		{10, base.Add(12 * time.Second)}, // 10 and 11 done: 12 is the oldest
		{12, time.Time{}},                // caught up
	}
	for _, s := range steps {
		tr.finish(0, s.finish)
		got := tr.oldest()
		if !got[0].Equal(s.want) {
			t.Errorf("after finishing %d: oldest %v, want %v", s.finish, got[0], s.want)
		}
		if !got[1].IsZero() {
			t.Errorf("partition 1 fetched nothing: oldest %v, want zero", got[1])
		}
	}
}
