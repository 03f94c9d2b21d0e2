package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
)

// fakeCommitWorld is the committer's world driven by a test: watermarks it
// moves, a sync it can hold and fail, and the commits made.
type fakeCommitWorld struct {
	mu        sync.Mutex
	marks     map[int32]int64
	commits   []map[int32]int64
	syncEnter chan struct{} // receives when a sync starts
	syncLeave chan error    // the sync returns what is sent here
	named     [][]string    // the tenants each sync named, sorted
}

func (w *fakeCommitWorld) watermarks() map[int32]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.marks)
}

func (w *fakeCommitWorld) ack(p int32, next int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.marks[p] = next
}

func (w *fakeCommitWorld) sync(_ context.Context, tenants []string) error {
	w.mu.Lock()
	w.named = append(w.named, slices.Sorted(slices.Values(tenants)))
	w.mu.Unlock()
	w.syncEnter <- struct{}{}
	return <-w.syncLeave
}

func (w *fakeCommitWorld) commit(_ context.Context, os kadm.Offsets) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	got := map[int32]int64{}
	os.Each(func(o kadm.Offset) { got[o.Partition] = o.At })
	w.commits = append(w.commits, got)
	return nil
}

func (w *fakeCommitWorld) committed() []map[int32]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]map[int32]int64(nil), w.commits...)
}

// TestCommitterCommitsOnlyWhatTheSyncCovered: the watermark read before
// the pusher's sync is what is committed. An ack that arrives while the
// sync runs may not be durable yet, so it waits for the next sync; and a
// sync that fails commits nothing.
func TestCommitterCommitsOnlyWhatTheSyncCovered(t *testing.T) {
	w := &fakeCommitWorld{
		marks:     map[int32]int64{0: 10, 1: 5},
		syncEnter: make(chan struct{}),
		syncLeave: make(chan error),
	}
	cm := &committer{
		topic: "t", group: "g", syncTimeout: time.Minute,
		commitOffsets: w.commit, watermarks: w.watermarks, sync: w.sync,
		metrics: newMetrics(prometheus.NewRegistry(), func() (int, int) { return 0, 0 }, func() bool { return true }),
		logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	cm.skipInitial(map[int32]int64{0: 0, 1: 0}, "")

	commit := func() <-chan error {
		done := make(chan error, 1)
		go func() { done <- cm.commit(context.Background()) }()
		<-w.syncEnter // the sync has started
		return done
	}

	done := commit()
	w.ack(0, 20) // acknowledged during the sync: not covered by it
	w.ack(1, 7)
	w.syncLeave <- nil
	if err := <-done; err != nil {
		t.Fatalf("commit: %v", err)
	}
	want := map[int32]int64{0: 10, 1: 5}
	if got := w.committed(); len(got) != 1 || !maps.Equal(got[0], want) {
		t.Fatalf("commits %v, want one of the watermarks read before the sync %v", got, want)
	}

	// Later syncs fail: nothing more is committed, however far the
	// watermarks move.
	for i := range 3 {
		done = commit()
		w.ack(0, int64(30+i))
		w.syncLeave <- errors.New("disk gone")
		if err := <-done; err == nil {
			t.Fatal("commit after a failed sync returned nil")
		}
	}
	if got := w.committed(); len(got) != 1 {
		t.Fatalf("commits after failed syncs: %v", got[1:])
	}
	if got := cm.lastCommitted(); !maps.Equal(got, want) {
		t.Fatalf("lastCommitted = %v, want %v", got, want)
	}

	// A sync that succeeds again commits what it covers.
	done = commit()
	w.ack(0, 99)
	w.syncLeave <- nil
	if err := <-done; err != nil {
		t.Fatalf("commit: %v", err)
	}
	if got := w.committed(); len(got) != 2 || !maps.Equal(got[1], map[int32]int64{0: 32, 1: 7}) {
		t.Fatalf("commits %v, want the last one {0:32 1:7}", got)
	}
}

// TestCommitterNamesTheTenantsOfWhatItCommits: each sync names the tenants
// finished before the watermarks it covers were read; a tenant finished
// during a sync waits for the next, and a failed sync's tenants are named
// again by the next.
func TestCommitterNamesTheTenantsOfWhatItCommits(t *testing.T) {
	w := &fakeCommitWorld{
		marks:     map[int32]int64{0: 10},
		syncEnter: make(chan struct{}),
		syncLeave: make(chan error),
	}
	var toSync syncSet
	cm := &committer{
		topic: "t", group: "g", syncTimeout: time.Minute,
		commitOffsets: w.commit, watermarks: w.watermarks, sync: w.sync, tenants: &toSync,
		metrics: newMetrics(prometheus.NewRegistry(), func() (int, int) { return 0, 0 }, func() bool { return true }),
		logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	cm.skipInitial(map[int32]int64{0: 0}, "")
	commit := func(syncErr error, during func()) error {
		done := make(chan error, 1)
		go func() { done <- cm.commit(context.Background()) }()
		<-w.syncEnter
		during()
		w.syncLeave <- syncErr
		return <-done
	}

	toSync.add("a")
	toSync.add("b")
	toSync.add("a")
	if err := commit(errors.New("pusher gone"), func() {
		toSync.add("c") // finished during the sync
		w.ack(0, 20)
	}); err == nil {
		t.Fatal("a commit whose sync failed returned nil")
	}
	if err := commit(nil, func() {}); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"a", "b"}, {"a", "b", "c"}}
	if !slices.EqualFunc(w.named, want, slices.Equal) {
		t.Fatalf("the syncs named %q, want %q", w.named, want)
	}
}

func TestSyncSetAsksForEveryTenantPastItsBound(t *testing.T) {
	var s syncSet
	if got := s.take(); got != nil {
		t.Fatalf("an empty set gave %q, want nil (every tenant)", got)
	}
	for i := range maxSyncTenants + 1 {
		s.add(fmt.Sprintf("tenant-%d", i))
	}
	if got := s.take(); got != nil {
		t.Fatalf("a set of %d tenants named %d, want nil (every tenant)", maxSyncTenants+1, len(got))
	}
	s.add("a")
	if got := s.take(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after an overflow was taken the set gave %q, want [a]", got)
	}
	s.add("b")
	s.putBack(nil) // a sync of every tenant failed
	if got := s.take(); got != nil {
		t.Fatalf("after a failed sync of every tenant the set gave %q, want nil", got)
	}
}

// TestCommitterTicksFromItsPhase: the ticks start after the phase, a part
// of the interval, so consumers started together do not Sync together.
func TestCommitterTicksFromItsPhase(t *testing.T) {
	w := &fakeCommitWorld{marks: map[int32]int64{0: 10}, syncEnter: make(chan struct{}, 1), syncLeave: make(chan error, 1)}
	w.syncLeave <- nil
	cm := &committer{
		topic: "t", group: "g", interval: time.Hour, syncTimeout: time.Minute,
		commitOffsets: w.commit, watermarks: w.watermarks, sync: w.sync,
		phase:   func(interval time.Duration) time.Duration { return interval / 18_000 }, // 200ms
		metrics: newMetrics(prometheus.NewRegistry(), func() (int, int) { return 0, 0 }, func() bool { return true }),
		logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	cm.skipInitial(map[int32]int64{0: 0}, "")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { cm.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	select {
	case <-w.syncEnter:
		if waited := time.Since(start); waited < 200*time.Millisecond {
			t.Fatalf("the first commit came %v after the start, before its 200ms phase", waited)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no commit within 10s of a 200ms phase (the interval is an hour)")
	}
}
