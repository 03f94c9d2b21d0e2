package lane

import (
	"context"
	"sync"
)

// window bounds what is in flight, in records and in bytes of record
// values. The fetch loop acquires before handing a record on, so a slow
// pusher slows fetching and memory stays bounded.
type window struct {
	maxCount, maxBytes int

	mu      sync.Mutex
	count   int
	bytes   int
	changed chan struct{} // closed and replaced on every release
}

func newWindow(maxCount, maxBytes int) *window {
	return &window{maxCount: maxCount, maxBytes: maxBytes, changed: make(chan struct{})}
}

// acquire takes room for one record of n bytes, waiting until there is
// room or ctx is done. A record larger than the whole byte bound is let in
// when the window is empty, so it cannot block forever.
func (w *window) acquire(ctx context.Context, n int) error {
	for {
		ok, changed := w.take(n)
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// tryAcquire takes room for one record of n bytes if there is room now.
func (w *window) tryAcquire(n int) bool {
	ok, _ := w.take(n)
	return ok
}

// take takes room for n bytes if there is room, else returns the channel
// closed on the next release.
func (w *window) take(n int) (bool, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.count < w.maxCount && (w.bytes+n <= w.maxBytes || w.count == 0) {
		w.count++
		w.bytes += n
		return true, nil
	}
	return false, w.changed
}

// release returns the room of one record of n bytes.
func (w *window) release(n int) {
	w.mu.Lock()
	w.count--
	w.bytes -= n
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

// usage returns the records and bytes in flight.
func (w *window) usage() (count, bytes int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.count, w.bytes
}
