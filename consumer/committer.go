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
// so a committed offset is never ahead of what the pusher made durable, and
// names in that sync the tenants finished since the last one (syncSet,
// below). It is given what it needs, not the consumer: a commit function, a
// snapshot of the watermarks and the pusher's sync (so a test can drive
// each).
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
	// tenants is what each sync names; nil syncs every tenant.
	tenants *syncSet
	// phase is the wait before the first tick; nil is a random part of
	// the interval (see run).
	phase   func(interval time.Duration) time.Duration
	metrics *metrics
	logger  *slog.Logger

	mu        sync.Mutex
	committed map[int32]int64 // next offset to read, as last committed
	// metadata is what is committed beside each offset: the ID of the
	// topic the start offsets belong to (reader.commitMetadata), given
	// with them (skipInitial).
	metadata string
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
	moved := kadm.Offsets{}
	for p, next := range cm.watermarks() {
		if last, ok := cm.committed[p]; ok && next <= last {
			continue
		}
		moved.Add(kadm.Offset{Topic: cm.topic, Partition: p, At: next, LeaderEpoch: -1, Metadata: cm.metadata})
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
// happens only once the watermark moves past them, and metadata as what to
// commit beside the offsets of their topic (reader.commitMetadata: its ID).
// The reader learns the topic's ID with its start offsets, at start-up and
// when it follows a re-created topic, and the committer is given both
// before any watermark of that topic is committed.
func (cm *committer) skipInitial(start map[int32]int64, metadata string) {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	cm.committed = make(map[int32]int64, len(start))
	maps.Copy(cm.committed, start)
	cm.metadata = metadata
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

// maxSyncTenants is the most tenants a Sync names; a consumer that
// finished records of more since its last Sync asks the pusher to sync
// every tenant, which costs the pusher no more than that many and keeps
// the request small.
const maxSyncTenants = 10_000

// syncSet is the tenants whose records were finished since the last Sync
// began: what the next Sync must make durable. A pusher serves several
// consumers, and a Sync that names its caller's tenants spares it the
// others' files (SyncRequest.tenants).
//
// A tenant is added before its record's offset can be committed (finish
// adds it before the tracker sees the record done), and the committer
// takes the set after it read the watermarks, so every record a commit
// covers has its tenant in the Sync before that commit.
type syncSet struct {
	mu sync.Mutex
	m  map[string]struct{}
	// all is set when the next Sync must cover every tenant: the set grew
	// past maxSyncTenants, or a Sync for every tenant failed.
	all bool
}

// add notes that a record of tenant was finished.
func (s *syncSet) add(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.all {
		return
	}
	if _, ok := s.m[tenant]; ok {
		return
	}
	if len(s.m) >= maxSyncTenants {
		s.all, s.m = true, nil
		return
	}
	if s.m == nil {
		s.m = make(map[string]struct{})
	}
	s.m[tenant] = struct{}{}
}

// take empties the set and returns the tenants for a Sync to name; nil
// asks for every tenant (so does a Sync with nothing added since the last:
// rare, and never wrong). A nil set always returns nil.
func (s *syncSet) take() []string {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.all || len(s.m) == 0 {
		s.all, s.m = false, nil
		return nil
	}
	out := make([]string, 0, len(s.m))
	for t := range s.m {
		out = append(out, t)
	}
	clear(s.m)
	return out
}

// putBack returns what take gave to a Sync that failed: the next Sync must
// cover it again.
func (s *syncSet) putBack(tenants []string) {
	if s == nil {
		return
	}
	if tenants == nil {
		s.mu.Lock()
		s.all, s.m = true, nil
		s.mu.Unlock()
		return
	}
	for _, t := range tenants {
		s.add(t)
	}
}
