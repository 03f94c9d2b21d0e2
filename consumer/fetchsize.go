package consumer

import (
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// fetchSizer keeps what one fetch holds once decompressed near
// -kafka.fetch-max-decompressed-bytes. Kafka counts a fetch's bytes as
// stored, compressed, while the client decompresses every batch of a
// fetch when it arrives and holds it all until the records are polled:
// with snappy at about 9:1 on remote-write requests, a 4 MiB fetch was
// 37 MiB of live heap, more than half of the consumer's at its peak
// replaying a backlog (docs/benchmarks.md, "What a consumer holds"). So
// the bytes asked of the broker follow the compression ratio of the
// batches read: the decompressed bound divided by the ratio, and never
// more than -kafka.fetch-max-bytes.
//
// It is a kgo hook (HookFetchBatchRead) and sets the client's fetch sizes
// through set (kgo's UpdateFetchMaxBytes), which applies from the next
// fetch on.
type fetchSizer struct {
	// most is -kafka.fetch-max-bytes, what a fetch may ask for at most.
	most int64
	// decompressed is -kafka.fetch-max-decompressed-bytes.
	decompressed int64
	set          func(maxBytes, maxPartitionBytes int32)

	mu sync.Mutex
	// compressed and raw are the batches' bytes before and after
	// decompression, decayed by fetchRatioDecay a batch so the ratio
	// follows the data when it changes.
	compressed, raw float64
	asked           int32
}

// fetchRatioDecay weighs a batch's bytes against those before it: the
// ratio is mostly that of the last few dozen batches (a fetch holds one
// to dozens).
const fetchRatioDecay = 0.95

// firstFetchRatio is the compression ratio assumed before any batch was
// read. It is high on purpose: a first fetch asked too small only costs a
// fetch (Kafka returns at least one batch whatever the bound), one asked
// too large holds its whole excess decompressed.
const firstFetchRatio = 64

// newFetchSizer returns a sizer asking for at most most bytes and about
// decompressed once decompressed. set receives each new size; the client
// is created with initial().
func newFetchSizer(most, decompressed int, set func(maxBytes, maxPartitionBytes int32)) *fetchSizer {
	s := &fetchSizer{most: int64(min(most, 1<<30)), decompressed: int64(decompressed), set: set}
	s.asked = s.size(float64(firstFetchRatio))
	return s
}

// newSizedClient returns a Kafka client with opts whose fetches a
// fetchSizer sizes, asking for at most most bytes and about decompressed
// once decompressed. opts must not assign partitions: the sizer resizes
// the client from its first fetch on, which must start after the client is
// returned (Run and scanPartition assign theirs later).
func newSizedClient(most, decompressed int, opts ...kgo.Opt) (*kgo.Client, error) {
	var cl *kgo.Client
	s := newFetchSizer(most, decompressed, func(maxBytes, maxPartitionBytes int32) {
		cl.UpdateFetchMaxBytes(maxBytes, maxPartitionBytes)
	})
	n := s.initial()
	cl, err := kgo.NewClient(append(opts[:len(opts):len(opts)],
		kgo.FetchMaxBytes(n), kgo.FetchMaxPartitionBytes(n), kgo.WithHooks(s))...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, nil
}

// initial is the size asked before any batch was read.
func (s *fetchSizer) initial() int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked
}

// size is the bytes to ask for at compression ratio ratio.
func (s *fetchSizer) size(ratio float64) int32 {
	n := int64(float64(s.decompressed) / max(ratio, 1))
	return int32(max(1, min(n, s.most))) //nolint:gosec // at most 1 GiB
}

// OnFetchBatchRead implements kgo.HookFetchBatchRead.
func (s *fetchSizer) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	if m.CompressedBytes <= 0 || m.UncompressedBytes <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compressed = s.compressed*fetchRatioDecay + float64(m.CompressedBytes)
	s.raw = s.raw*fetchRatioDecay + float64(m.UncompressedBytes)
	if n := s.size(s.raw / s.compressed); n != s.asked {
		s.asked = n
		s.set(n, n)
	}
}
