package consumer

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Stats is a snapshot of a consumer's progress, for status lines and tests.
type Stats struct {
	// Acks counts answers by status: ok, client_error, server_error, and
	// stream_error for requests whose stream broke.
	Acks map[string]int64
	// Skipped counts records finished as client errors.
	Skipped int64
	// Committed is the last committed offset (next to read) per partition.
	Committed map[int32]int64
	// HighWatermarks is each partition's end offset as of the last fetch.
	HighWatermarks map[int32]int64
	// Inflight is the number of records fetched and not yet acknowledged.
	Inflight int
}

// Lag returns the records not yet committed, summed over partitions.
func (s Stats) Lag() int64 {
	var lag int64
	for p, hw := range s.HighWatermarks {
		lag += max(0, hw-s.Committed[p])
	}
	return lag
}

type stats struct {
	ok, clientErr, serverErr, streamErr atomic.Int64
	skipped                             atomic.Int64

	mu sync.Mutex
	hw map[int32]int64
}

func (s *stats) countAck(status string) {
	switch status {
	case "ok":
		s.ok.Add(1)
	case "client_error":
		s.clientErr.Add(1)
	case "server_error":
		s.serverErr.Add(1)
	default:
		s.streamErr.Add(1)
	}
}

func (s *stats) setHighWatermark(p int32, hw int64) {
	s.mu.Lock()
	if s.hw == nil {
		s.hw = map[int32]int64{}
	}
	s.hw[p] = hw
	s.mu.Unlock()
}

// highWatermarks returns a copy of the last fetches' end offsets.
func (s *stats) highWatermarks() map[int32]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.hw)
}

// resetHighWatermarks forgets the high watermarks: they were a deleted
// topic's.
func (s *stats) resetHighWatermarks() {
	s.mu.Lock()
	s.hw = nil
	s.mu.Unlock()
}

// Stats returns a snapshot of the consumer's progress.
func (c *Consumer) Stats() Stats {
	hw := c.stats.highWatermarks()
	n, _ := c.lanes.Usage()
	return Stats{
		Acks: map[string]int64{
			"ok":           c.stats.ok.Load(),
			"client_error": c.stats.clientErr.Load(),
			"server_error": c.stats.serverErr.Load(),
			"stream_error": c.stats.streamErr.Load(),
		},
		Skipped:        c.stats.skipped.Load(),
		Committed:      c.committer.lastCommitted(),
		HighWatermarks: hw,
		Inflight:       n,
	}
}
