package consumer

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
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

func (w *fakeCommitWorld) sync(context.Context) error {
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
	cm.skipInitial(map[int32]int64{0: 0, 1: 0})

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
