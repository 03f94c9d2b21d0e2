package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// committer commits the watermark of each owned partition to the consumer
// group, without joining it. Before every commit it asks the pusher to sync,
// so a committed offset is never ahead of what the pusher made durable. It
// is given what it needs, not the consumer: a commit function, a snapshot
// of the watermarks and the pusher's sync (so a test can drive each).
type committer struct {
	topic, group string
	interval     time.Duration // -kafka.commit-interval
	syncTimeout  time.Duration // -pusher.sync-timeout
	// commitOffsets commits offsets to the group (commitWith wraps an
	// admin client's CommitOffsets).
	commitOffsets func(context.Context, kadm.Offsets) error
	// watermarks returns the next offset to commit per owned partition,
	// nil before the start offsets are known.
	watermarks func() map[int32]int64
	// sync asks the pusher to make what it acknowledged durable for
	// tenants, or for every tenant when tenants is nil.
	sync func(ctx context.Context, tenants []string) error
	// metadata is what is committed beside each offset (the topic's ID,
	// see reader.commitMetadata); nil commits none.
	metadata func() string
	// tenants is what each sync names; nil syncs every tenant.
	tenants *syncSet
	// phase is the wait before the first tick; nil is a random part of
	// the interval (see run).
	phase   func(interval time.Duration) time.Duration
	metrics *metrics
	logger  *slog.Logger

	mu        sync.Mutex
	committed map[int32]int64 // next offset to read, as last committed
}

// run commits every -kafka.commit-interval until ctx is done. A failed
// commit is logged and retried on the next tick.
//
// The first tick comes after a random part of the interval: consumers started
// together (a deployment, a test, a benchmark) would otherwise call the
// pusher's Sync at the same moments every interval, and its round would
// cover all of their tenants at once where, spread, each covers one
// consumer's.
func (cm *committer) run(ctx context.Context) {
	phaseOf := cm.phase
	if phaseOf == nil {
		phaseOf = rand.N[time.Duration]
	}
	phase := time.NewTimer(phaseOf(cm.interval))
	defer phase.Stop()
	select {
	case <-ctx.Done():
		return
	case <-phase.C:
	}
	t := time.NewTicker(cm.interval)
	defer t.Stop()
	for {
		if err := cm.commit(ctx); err != nil && ctx.Err() == nil {
			cm.logger.Warn("commit failed: retrying on the next tick", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// commit commits the partitions whose watermark moved since the last
// commit.
func (cm *committer) commit(ctx context.Context) error {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	// Snapshot the watermarks before the sync: the sync then covers every
	// acknowledgement they reflect. Read after it, they could include acks
	// that arrived during the sync, which it may not have made durable
	// (TestCommitterCommitsOnlyWhatTheSyncCovered).
	var metadata string
	if cm.metadata != nil {
		metadata = cm.metadata()
	}
	moved := kadm.Offsets{}
	for p, next := range cm.watermarks() {
		if last, ok := cm.committed[p]; ok && next <= last {
			continue
		}
		moved.Add(kadm.Offset{Topic: cm.topic, Partition: p, At: next, LeaderEpoch: -1, Metadata: metadata})
	}
	if len(moved) == 0 {
		return nil
	}
	// Taken after the watermarks were read: a record they cover had its
	// tenant added before it was finished (syncSet).
	names := cm.tenants.take()
	sctx, cancel := context.WithTimeout(ctx, cm.syncTimeout)
	defer cancel()
	if err := cm.sync(sctx, names); err != nil {
		cm.tenants.putBack(names)
		cm.metrics.commits.WithLabelValues("sync_failed").Inc()
		return err
	}
	if err := cm.commitOffsets(ctx, moved); err != nil {
		cm.metrics.commits.WithLabelValues("commit_failed").Inc()
		return fmt.Errorf("commit offsets to group %q: %w", cm.group, err)
	}
	cm.metrics.commits.WithLabelValues("ok").Inc()
	moved.Each(func(o kadm.Offset) {
		cm.committed[o.Partition] = o.At
		cm.metrics.committed.WithLabelValues(strconv.Itoa(int(o.Partition))).Set(float64(o.At))
	})
	return nil
}

// skipInitial records the start offsets as committed, so the first commit
// happens only once the watermark moves past them.
func (cm *committer) skipInitial(start map[int32]int64) {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	cm.committed = make(map[int32]int64, len(start))
	maps.Copy(cm.committed, start)
}

// lastCommitted returns the offsets committed so far.
func (cm *committer) lastCommitted() map[int32]int64 {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	return maps.Clone(cm.committed)
}

// commitWith returns a commit function for the committer that commits to
// group through admin.
func commitWith(admin *kadm.Client, group string) func(context.Context, kadm.Offsets) error {
	return func(ctx context.Context, os kadm.Offsets) error {
		resp, err := admin.CommitOffsets(ctx, group, os)
		if err == nil {
			err = resp.Error()
		}
		return err
	}
}
