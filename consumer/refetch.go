package consumer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Errors of the refetcher, wrapped with the partition and offsets of the read.
var (
	// errRefetcherClosed is returned by reads after (or cut short by) close.
	errRefetcherClosed = errors.New("refetcher closed")
	// errKafkaSilent is returned when Kafka gave nothing for refetchStall:
	// it is down or unreachable, or (rarely) the log past the position
	// holds nothing a client is shown. Retrying later is the answer to both.
	errKafkaSilent = errors.New("no answer from Kafka")
	// errLogTruncated is returned when the log turned out shorter than it
	// was when the read began; the next read sees the new end and reports
	// the offsets past it as missing.
	errLogTruncated = errors.New("log truncated during the read")
)

// refetchStall is how long a read waits for any answer from Kafka (an end
// offset, a fetch with records) before giving up with errKafkaSilent. A
// broker with data to give answers a fetch in milliseconds, so this is only
// reached when something is wrong; it keeps a caller without a deadline
// from waiting forever.
const refetchStall = 10 * time.Second

// refetcher re-reads records whose values were dropped from memory (parked
// records of a lane past its share of the window), by partition and offset.
//
// Each read uses a client of its own, made for the read and closed after
// it. Reads are rare (a stuck tenant recovering) and each covers hundreds of
// records, so the cost of a connection and a metadata request per read is
// small next to the fetches (measured in BenchmarkRefetchRead), and it buys
// isolation: no fetch buffered for one read, no offset reset, leader epoch
// or "has consumed" state of the client's cursor can reach the next read.
//
// Reads run one at a time, through a one-slot semaphore that, unlike a
// mutex, lets a waiting caller give up when its context ends. Running them
// one by one keeps the memory of re-reading within one fetch however many
// lanes recover at once, and a slow read only delays other re-reads, never
// the main fetch path, which has its own client.
type refetcher struct {
	topic  string
	logger *slog.Logger
	opts   []kgo.Opt
	// fetchBytes and decompressedBytes bound each fetch of a read, as
	// Kafka counts it and decompressed (fetchsize.go).
	fetchBytes, decompressedBytes int

	// stall bounds the wait for each answer from Kafka; see refetchStall.
	stall time.Duration

	// slot holds a token while a read runs.
	slot chan struct{}
	// life is cancelled by close, which cuts short the running read.
	life     context.Context
	shutdown context.CancelFunc
}

// newRefetcher returns a refetcher for cfg.Topic. It does not contact Kafka:
// every read makes its own client.
func newRefetcher(cfg Config, logger *slog.Logger) (*refetcher, error) {
	brokers, err := cfg.Brokers()
	if err != nil {
		return nil, err
	}
	kafkaOpts, err := cfg.Kafka.Opts()
	if err != nil {
		return nil, err
	}
	life, shutdown := context.WithCancel(context.Background())
	return &refetcher{
		topic:  cfg.Topic,
		logger: logger.With("component", "refetcher"),
		opts: append(kafkaOpts,
			kgo.SeedBrokers(brokers...),
			// A read that starts below the log start (retention or
			// DeleteRecords removed its first offsets) gets
			// OffsetOutOfRange; resuming at the log start makes the loss
			// visible as a first record past the offsets wanted.
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			// Transaction markers take offsets too. Seeing them lets a
			// read pass them, instead of waiting for a record that never
			// comes when markers are the last thing in its range.
			kgo.KeepControlRecords(),
			kgo.WithLogger(kafkaLogger(logger)),
		),
		// kgo holds the fetch being scanned and, meanwhile, reads the
		// next one ahead; half of each bound a fetch keeps the two
		// within it.
		fetchBytes:        max(1, min(cfg.FetchMaxBytes, 1<<30)/2),
		decompressedBytes: max(1, cfg.FetchMaxDecompressed/2),
		stall:             refetchStall,
		slot:              make(chan struct{}, 1),
		life:              life,
		shutdown:          shutdown,
	}, nil
}

// read returns the values of the records of partition p at offsets, by
// offset. The offsets are normally ascending and unique; others are sorted
// and deduplicated. An offset with no record in the log any more (deleted
// by retention or DeleteRecords, compacted away, past a truncated end, or
// taken by a transaction marker) is returned in missing, in ascending
// order: every offset asked for is in exactly one of values and missing.
//
// It reads only [offsets[0], offsets[last]], stops once past the last
// offset, and keeps copies of the values asked for only, so that what it
// returns does not pin the fetched batches the other records came in.
//
// It returns an error, and no result, when ctx ends, when the refetcher is
// closed, or when Kafka fails or does not answer within refetchStall; the
// caller retries with backoff.
func (r *refetcher) read(ctx context.Context, p int32, offsets []int64) (values map[int64][]byte, missing []int64, err error) {
	want := normalizeOffsets(offsets)
	if len(want) == 0 {
		return map[int64][]byte{}, nil, nil
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("re-read partition %d offsets %d-%d: %w", p, want[0], want[len(want)-1], err)
		}
	}()
	release, err := r.acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer release()

	// Close cuts the read short; after it, ctx.Err says so below.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(r.life, cancel)()

	began := time.Now()
	s := newOffsetScan(want)
	if err := r.scanPartition(ctx, p, s); err != nil {
		if r.life.Err() != nil {
			err = errRefetcherClosed
		}
		return nil, nil, err
	}
	values, missing = s.result()
	r.logger.Debug("re-read parked records", "partition", p, "from", want[0], "to", want[len(want)-1],
		"wanted", len(want), "missing", len(missing), "scanned", s.scanned, "took", time.Since(began).Round(time.Microsecond))
	return values, missing, nil
}

// acquire waits for the read slot and returns its release.
func (r *refetcher) acquire(ctx context.Context) (func(), error) {
	if err := ctx.Err(); err != nil { // a free slot must not win over it
		return nil, err
	}
	select {
	case r.slot <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-r.life.Done():
		return nil, errRefetcherClosed
	}
	release := func() { <-r.slot }
	if r.life.Err() != nil { // the select may pick the slot after close
		release()
		return nil, errRefetcherClosed
	}
	return release, nil
}

// close ends the running read, if any, waits for it to return, and makes
// later reads fail with errRefetcherClosed. It may be called more than once.
func (r *refetcher) close() {
	r.shutdown()
	// Taking the slot waits for the running read; giving it back at once
	// lets a second close, or a read racing this one, see life ended.
	r.slot <- struct{}{}
	<-r.slot
}

// scanPartition reads p with a new client until s is settled.
func (r *refetcher) scanPartition(ctx context.Context, p int32, s *offsetScan) error {
	cl, err := newSizedClient(r.fetchBytes, r.decompressedBytes, r.opts...)
	if err != nil {
		return err
	}
	defer cl.Close()

	// Without the end, a read of offsets at or past it would wait for
	// records that never come: kgo hands out only fetches with records.
	end, err := r.endOffset(ctx, cl, p)
	if err != nil {
		return err
	}
	s.end(end)
	if s.done() {
		return nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{r.topic: {p: kgo.NewOffset().At(s.first())}})
	for !s.done() {
		if err := r.pollOnce(ctx, cl, p, s); err != nil {
			return err
		}
	}
	return nil
}

// endOffset returns the high watermark of p: where the next record will go.
func (r *refetcher) endOffset(ctx context.Context, cl *kgo.Client, p int32) (int64, error) {
	lctx, cancel := context.WithTimeout(ctx, r.stall)
	defer cancel()
	listed, err := kadm.NewClient(cl).ListEndOffsets(lctx, r.topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return 0, r.silence(ctx, lctx, fmt.Errorf("list end offsets: %w", err))
	}
	o, ok := listed.Lookup(r.topic, p)
	if !ok {
		return 0, fmt.Errorf("%w: topic %q has no partition %d", ErrPartitionNotFound, r.topic, p)
	}
	return o.Offset, nil
}

// pollOnce feeds s the records of one poll.
func (r *refetcher) pollOnce(ctx context.Context, cl *kgo.Client, p int32, s *offsetScan) error {
	pctx, cancel := context.WithTimeout(ctx, r.stall)
	defer cancel()
	fetches := cl.PollFetches(pctx)
	if err := r.silence(ctx, pctx, nil); err != nil {
		return err
	}
	var err error
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		// The client consumes p alone; anything else would be a bug
		// in it, and is not ours to read.
		if err != nil || fp.Topic != r.topic || fp.Partition != p {
			return
		}
		if fp.Err != nil {
			err = fmt.Errorf("fetch: %w", fp.Err)
			return
		}
		err = s.feed(fp.Records)
	})
	return err
}

// silence turns the end of a wait into the error a read returns: the
// caller's ctx (or close) when that ended, errKafkaSilent when only the
// wait's own timeout did, and otherwise err.
func (r *refetcher) silence(ctx, wait context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case wait.Err() != nil:
		return fmt.Errorf("%w for %s", errKafkaSilent, r.stall)
	}
	return err
}

// normalizeOffsets returns offsets ascending and without duplicates,
// copying them only if they are not already so.
func normalizeOffsets(offsets []int64) []int64 {
	for i := 1; i < len(offsets); i++ {
		if offsets[i] <= offsets[i-1] {
			sorted := slices.Clone(offsets)
			slices.Sort(sorted)
			return slices.Compact(sorted)
		}
	}
	return offsets
}

// offsetScan settles the wanted offsets of one partition, in order, from
// the records of the partition read in offset order: an offset is found
// when a data record has it, and missing once the log has shown it has
// nothing there (a later record, or an end below it).
type offsetScan struct {
	want    []int64 // ascending, unique
	next    int     // want[:next] are settled
	limit   int     // want[limit:] are at or past the log end: missing
	values  map[int64][]byte
	missing []int64
	scanned int // records looked at, for the log
}

func newOffsetScan(want []int64) *offsetScan {
	return &offsetScan{want: want, limit: len(want), values: make(map[int64][]byte, len(want))}
}

// first returns the offset to start reading at.
func (s *offsetScan) first() int64 { return s.want[s.next] }

// done reports whether every wanted offset is settled.
func (s *offsetScan) done() bool { return s.next >= s.limit }

// end marks the wanted offsets at or past the log end o as missing: no
// record can be read there.
func (s *offsetScan) end(o int64) {
	for s.limit > s.next && s.want[s.limit-1] >= o {
		s.limit--
	}
}

// feed settles what recs, consecutive records of the partition, show.
func (s *offsetScan) feed(recs []*kgo.Record) error {
	for _, rec := range recs {
		if s.done() {
			return nil
		}
		if rec.Offset < s.want[0] {
			// The read began at want[0]: an earlier record means the
			// client was told want[0] is past the end and reset to the
			// log start. Scanning on from there could read the whole
			// partition for nothing.
			return fmt.Errorf("%w: record %d came before the first offset read", errLogTruncated, rec.Offset)
		}
		s.scanned++
		s.take(rec)
	}
	return nil
}

// take settles the wanted offsets up to rec's: those below it are gone
// from the log, and rec's own is found unless rec is a transaction marker.
func (s *offsetScan) take(rec *kgo.Record) {
	for !s.done() && s.want[s.next] < rec.Offset {
		s.missing = append(s.missing, s.want[s.next])
		s.next++
	}
	if s.done() || s.want[s.next] != rec.Offset {
		return // another tenant's record, or one already settled
	}
	if rec.Attrs.IsControl() {
		s.missing = append(s.missing, rec.Offset)
	} else {
		// A copy: the value shares memory with the whole fetched batch.
		s.values[rec.Offset] = bytes.Clone(rec.Value)
	}
	s.next++
}

// result returns the values found and the offsets missing, ascending.
func (s *offsetScan) result() (map[int64][]byte, []int64) {
	return s.values, append(s.missing, s.want[s.limit:]...)
}
