package consumer

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// tracker keeps, per partition, the offsets fetched but not yet finished
// (acknowledged OK or as a client error) and derives the watermark from
// them. Records finish out of order, because tenants proceed in parallel;
// the watermark only moves over a prefix that is entirely finished.
type tracker struct {
	parts map[int32]*partitionTracker // fixed at construction: no lock needed
}

// partitionTracker is one partition's pending offsets in fetch order.
// Offsets are increasing but may have gaps (compaction, transaction
// markers), so they are kept explicitly rather than as a range.
type partitionTracker struct {
	mu      sync.Mutex
	offsets []int64
	done    []bool
	// stamps are the records' timestamps, for the oldest unacknowledged
	// record's age.
	stamps []time.Time
	head   int   // offsets[:head] are finished and forgotten
	next   int64 // the offset to commit: all records before it are finished
}

func newTracker(start map[int32]int64) *tracker {
	t := &tracker{parts: make(map[int32]*partitionTracker, len(start))}
	for p, next := range start {
		t.parts[p] = &partitionTracker{next: next}
	}
	return t
}

// owns reports whether p is one of the tracked partitions.
func (t *tracker) owns(p int32) bool {
	_, ok := t.parts[p]
	return ok
}

// add records that offset o of partition p, a record with timestamp ts,
// was fetched. Offsets of a partition must be added in increasing order.
func (t *tracker) add(p int32, o int64, ts time.Time) error {
	pt, ok := t.parts[p]
	if !ok {
		return fmt.Errorf("partition %d is not owned by this consumer", p)
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if n := len(pt.offsets); (n > pt.head && o <= pt.offsets[n-1]) || o < pt.next {
		return fmt.Errorf("partition %d: offset %d fetched twice or out of order", p, o)
	}
	if pt.head == len(pt.offsets) && pt.head > 0 {
		// Everything pending is finished: restart the slices cheaply.
		pt.offsets, pt.done, pt.stamps, pt.head = pt.offsets[:0], pt.done[:0], pt.stamps[:0], 0
	}
	pt.offsets = append(pt.offsets, o)
	pt.done = append(pt.done, false)
	pt.stamps = append(pt.stamps, ts)
	return nil
}

// finish marks offset o of partition p finished and advances the watermark
// over the finished prefix.
func (t *tracker) finish(p int32, o int64) {
	pt := t.parts[p]
	pt.mu.Lock()
	defer pt.mu.Unlock()
	i, found := slices.BinarySearch(pt.offsets[pt.head:], o)
	if !found {
		return // finished twice: harmless, the first call counted
	}
	pt.done[pt.head+i] = true
	for pt.head < len(pt.offsets) && pt.done[pt.head] {
		pt.next = pt.offsets[pt.head] + 1
		pt.head++
	}
	if pt.head > 1024 && pt.head > len(pt.offsets)/2 {
		// Drop the finished prefix so memory follows what is in flight.
		n := copy(pt.offsets, pt.offsets[pt.head:])
		copy(pt.done, pt.done[pt.head:])
		copy(pt.stamps, pt.stamps[pt.head:])
		pt.offsets, pt.done, pt.stamps, pt.head = pt.offsets[:n], pt.done[:n], pt.stamps[:n], 0
	}
}

// watermarks returns, per partition, the next offset to commit: every
// record before it is finished.
func (t *tracker) watermarks() map[int32]int64 {
	out := make(map[int32]int64, len(t.parts))
	for p, pt := range t.parts {
		pt.mu.Lock()
		out[p] = pt.next
		pt.mu.Unlock()
	}
	return out
}

// uncommitted returns how many records of partition p were fetched past
// its watermark, finished or not.
func (t *tracker) uncommitted(p int32) int {
	pt := t.parts[p]
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return len(pt.offsets) - pt.head
}

// pendingIn returns the number of unfinished records of partition p.
func (t *tracker) pendingIn(p int32) int {
	pt, ok := t.parts[p]
	if !ok {
		return 0
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	n := 0
	for _, d := range pt.done[pt.head:] {
		if !d {
			n++
		}
	}
	return n
}

// pending returns the number of unfinished records of all partitions.
func (t *tracker) pending() int {
	n := 0
	for _, pt := range t.parts {
		pt.mu.Lock()
		for _, d := range pt.done[pt.head:] {
			if !d {
				n++
			}
		}
		pt.mu.Unlock()
	}
	return n
}

// oldest returns, per partition, the timestamp of the oldest record
// fetched and not finished, the zero time when every fetched record is. The
// watermark waits for that record, so it is the first one not finished.
func (t *tracker) oldest() map[int32]time.Time {
	out := make(map[int32]time.Time, len(t.parts))
	for p, pt := range t.parts {
		pt.mu.Lock()
		var ts time.Time
		if pt.head < len(pt.offsets) {
			ts = pt.stamps[pt.head]
		}
		pt.mu.Unlock()
		out[p] = ts
	}
	return out
}
