package consumer

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// committer commits the watermark of each owned partition to the consumer
// group, without joining it. Before every commit it asks the pusher to sync,
// so a committed offset is never ahead of what the pusher made durable.
type committer struct {
	c *Consumer

	mu        sync.Mutex
	committed map[int32]int64 // next offset to read, as last committed
}

func newCommitter(c *Consumer) *committer {
	return &committer{c: c, committed: map[int32]int64{}}
}

// run commits every -kafka.commit-interval until ctx is done. A failed
// commit is logged and retried on the next tick.
func (cm *committer) run(ctx context.Context) {
	t := time.NewTicker(cm.c.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := cm.commit(ctx); err != nil && ctx.Err() == nil {
				cm.c.logger.Warn("commit failed: retrying on the next tick", "err", err)
			}
		}
	}
}

// commit commits the partitions whose watermark moved since the last
// commit.
func (cm *committer) commit(ctx context.Context) error {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	tr := cm.c.tracker.Load()
	if tr == nil {
		return nil
	}
	// Snapshot the watermarks before the sync: the sync then covers every
	// acknowledgement they reflect.
	moved := kadm.Offsets{}
	for p, next := range tr.watermarks() {
		if last, ok := cm.committed[p]; ok && next <= last {
			continue
		}
		moved.Add(kadm.Offset{Topic: cm.c.cfg.Topic, Partition: p, At: next, LeaderEpoch: -1})
	}
	if len(moved) == 0 {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, cm.c.cfg.SyncTimeout)
	defer cancel()
	if err := cm.c.sender.sync(sctx); err != nil {
		cm.c.metrics.commits.WithLabelValues("sync_failed").Inc()
		return err
	}
	resp, err := cm.c.admin.CommitOffsets(ctx, cm.c.cfg.ConsumerGroup, moved)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		cm.c.metrics.commits.WithLabelValues("commit_failed").Inc()
		return fmt.Errorf("commit offsets to group %q: %w", cm.c.cfg.ConsumerGroup, err)
	}
	cm.c.metrics.commits.WithLabelValues("ok").Inc()
	moved.Each(func(o kadm.Offset) {
		cm.committed[o.Partition] = o.At
		cm.c.metrics.committed.WithLabelValues(strconv.Itoa(int(o.Partition))).Set(float64(o.At))
	})
	return nil
}

// skipInitial records the start offsets as committed, so the first commit
// happens only once the watermark moves past them.
func (cm *committer) skipInitial(start map[int32]int64) {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	maps.Copy(cm.committed, start)
}

// lastCommitted returns the offsets committed so far.
func (cm *committer) lastCommitted() map[int32]int64 {
	cm.mu.Lock()
	defer cm.mu.Unlock()
	return maps.Clone(cm.committed)
}
