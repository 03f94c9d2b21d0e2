package tsdbstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/internal/poll"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// Sync rounds stand alone: run and spawn are their only world.
func TestCallersArrivingDuringARoundShareTheNextOne(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	entered := make(chan *syncRound, 2)
	release := make(chan struct{})
	rs := syncRounds{
		run: func(r *syncRound) (int, error) {
			entered <- r
			<-release
			return 7, nil
		},
		spawn: func(f func()) error { go f(); return nil },
	}
	answers := make(chan error, 4)
	await := func(tenants ...string) {
		go func() {
			n, err := rs.await(ctx, tenants)
			if err == nil && n != 7 {
				err = errors.New("a caller got another round's count")
			}
			answers <- err
		}()
	}
	await("a")
	first := <-entered
	// These arrived after the first round started, which may have passed
	// their commits: the next round serves them, all three in one.
	await("b")
	await("c")
	await("b")
	poll.Until(t, 5*time.Second, time.Millisecond, "three callers wait for the next round", func() bool {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		return rs.next != nil && rs.next.callers == 3
	})
	release <- struct{}{}
	second := <-entered
	_, hasB := second.tenants["b"]
	_, hasC := second.tenants["c"]
	if second == first || second.all || len(second.tenants) != 2 || !hasB || !hasC {
		t.Fatalf("second round %+v, want a new one covering b and c only", second)
	}
	release <- struct{}{}
	for range 4 {
		if err := <-answers; err != nil {
			t.Fatal(err)
		}
	}
	if n := rs.started.Load(); n != 2 {
		t.Fatalf("%d rounds for 4 callers, want 2", n)
	}
}

func TestNoRoundStartsOnceTheStoreIsShut(t *testing.T) {
	rs := syncRounds{
		run:   func(*syncRound) (int, error) { t.Fatal("a round ran"); return 0, nil },
		spawn: func(func()) error { return backend.ErrShuttingDown },
	}
	if _, err := rs.await(context.Background(), nil); !errors.Is(err, backend.ErrShuttingDown) {
		t.Fatalf("error %v, want the shutdown", err)
	}
	if rs.current != nil {
		t.Fatal("a round that never started is current: the next caller would wait for it forever")
	}
}
