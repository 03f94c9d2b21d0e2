package lane

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestWindowBlocksAtItsCountAndByteBounds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w := newWindow(2, 100)
	mustAcquire(t, ctx, w, 60)
	if err := tryAcquire(w, 60); err == nil {
		t.Fatal("60+60 bytes fit in a 100-byte window")
	}
	mustAcquire(t, ctx, w, 40)
	if err := tryAcquire(w, 0); err == nil {
		t.Fatal("a third record fits in a 2-record window")
	}
	got := make(chan error, 1)
	go func() { got <- w.acquire(ctx, 50) }()
	time.Sleep(20 * time.Millisecond)
	w.release(60)
	if err := <-got; err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	if n, b := w.usage(); n != 2 || b != 90 {
		t.Fatalf("usage = %d records, %d bytes; want 2, 90", n, b)
	}
}

func TestWindowLetsAnOversizedRecordInWhenEmpty(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w := newWindow(10, 100)
	mustAcquire(t, ctx, w, 1000)
	if err := tryAcquire(w, 1); err == nil {
		t.Fatal("window over its bytes still admits")
	}
	w.release(1000)
	mustAcquire(t, ctx, w, 1)
}

func mustAcquire(t *testing.T, ctx context.Context, w *window, n int) {
	t.Helper()
	if err := w.acquire(ctx, n); err != nil {
		t.Fatalf("acquire %d: %v", n, err)
	}
}

// tryAcquire acquires if there is room now.
func tryAcquire(w *window, n int) error {
	if !w.tryAcquire(n) {
		return errors.New("no room")
	}
	return nil
}
