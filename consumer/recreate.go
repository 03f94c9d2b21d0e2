package consumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// A topic deleted and re-created under the same name.
//
// The fetch client keeps the topic ID it started with and never adopts a
// new one: after a re-creation it answers UNKNOWN_TOPIC_ID for ever. The
// consumer follows the new topic instead of only failing /ready: records
// produced to it are Ferry's users' data, and a consumer that waits for a
// human loses none of it only if the human comes before retention. So on
// UNKNOWN_TOPIC_ID the reader asks the metadata for the topic's ID, and
// when it is another one:
//
//  1. fetching stops and the client forgets the old topic (reader.fetch);
//  2. the old topic's offsets are never committed again: from here on the
//     committer sees no watermarks, and the new topic's start offsets are
//     committed at once, over whatever the group held for the old topic (a
//     commit may have landed after Kafka deleted the group's offsets with
//     the topic), so a restart cannot apply them to the new topic;
//  3. the old topic's records already fetched are pushed and acknowledged
//     (their data was read before the deletion);
//  4. what was produced to the old topic and not fetched is counted lost
//     (cause topic_deleted, from the last end offset known), the
//     re-creation counted and logged, and the new topic read from its log
//     start offset with a new tracker.
//
// Parked records of the old topic (a tenant retried for long) are read
// again from the new topic by the refetcher, which checks no topic ID: a
// re-creation while a tenant is parked is not handled.

// errTopicRecreated is what reader.fetch returns when the topic was
// deleted and re-created under the same name.
var errTopicRecreated = errors.New("topic deleted and re-created")

// currentTopicID returns the topic's ID as the metadata says now.
func (r *reader) currentTopicID(ctx context.Context) (kadm.TopicID, error) {
	topics, err := r.admin.ListTopics(ctx, r.cfg.Topic)
	if err != nil {
		return kadm.TopicID{}, fmt.Errorf("describe topic %q: %w", r.cfg.Topic, err)
	}
	td, ok := topics[r.cfg.Topic]
	switch {
	case !ok:
		return kadm.TopicID{}, fmt.Errorf("describe topic %q: not in the metadata", r.cfg.Topic)
	case td.Err != nil:
		return kadm.TopicID{}, fmt.Errorf("describe topic %q: %w", r.cfg.Topic, td.Err)
	}
	return td.ID, nil
}

// recreated reports whether the topic now has another ID than the one the
// start offsets belong to. A topic deleted and not yet re-created is not:
// its fetches keep failing, with backoff, until it is.
func (r *reader) recreated(ctx context.Context) bool {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	id, err := r.currentTopicID(lctx)
	return err == nil && id != (kadm.TopicID{}) && id != r.topicID
}

// followRecreated moves the consumer from the old topic to the new one
// (steps 2 to 4 above) and returns the new topic's start offsets. It
// returns ctx's error when ctx ends first; nothing of the old topic is
// committed then either.
func (c *Consumer) followRecreated(ctx context.Context) (map[int32]int64, error) {
	c.following.Store(true)
	old := c.tracker.Load()
	// The fetch loop has returned: its next offsets are the old topic's
	// fetched ends.
	oldID, fetched := c.reader.topicID, maps.Clone(c.reader.next)
	start, err := c.newTopicStart(ctx)
	if err != nil {
		return nil, err
	}
	for old.pending() > 0 {
		sleep(ctx, 20*time.Millisecond)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	ends := c.report.lag.endOffsets()
	for _, p := range c.owned {
		if ends[p] > fetched[p] {
			c.reader.lost(p, lostTopicDeleted, fetched[p], ends[p], -1)
		}
	}
	c.metrics.recreations.Inc()
	c.logger.Error("topic deleted and re-created: reading the new topic from its start",
		"old_topic_id", oldID, "new_topic_id", c.reader.topicID, "start", start)
	c.report.lag.reset()
	c.stats.resetHighWatermarks()
	c.committer.skipInitial(start)
	c.tracker.Store(newTracker(start))
	c.following.Store(false)
	return start, nil
}

// newTopicStart reads the re-created topic's ID and log start offsets,
// retrying while Kafka does not answer, and commits them.
func (c *Consumer) newTopicStart(ctx context.Context) (map[int32]int64, error) {
	for attempt := 0; ; attempt++ {
		start, err := c.listNewTopicStart(ctx)
		if err == nil {
			if err = c.committer.commitOffsets(ctx, offsetsOf(c.cfg.Topic, start)); err == nil {
				return start, nil
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		delay := c.backoff.Delay(attempt, 0)
		c.logger.Warn("topic re-created: its start offsets are not committed yet, retrying", "err", err, "retry_in", delay.Round(time.Millisecond))
		sleep(ctx, delay)
	}
}

// listNewTopicStart lists the topic's ID and its owned partitions' log
// start offsets.
func (c *Consumer) listNewTopicStart(ctx context.Context) (map[int32]int64, error) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	id, err := c.reader.currentTopicID(lctx)
	if err != nil {
		return nil, err
	}
	starts, err := c.admin.ListStartOffsets(lctx, c.cfg.Topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %q: %w", c.cfg.Topic, err)
	}
	start := make(map[int32]int64, len(c.owned))
	for _, p := range c.owned {
		o, ok := starts.Lookup(c.cfg.Topic, p)
		if !ok {
			return nil, fmt.Errorf("%w: topic %q has no partition %d", ErrPartitionNotFound, c.cfg.Topic, p)
		}
		start[p] = o.Offset
	}
	c.reader.topicID = id
	return start, nil
}

// offsetsOf returns start as offsets of topic to commit.
func offsetsOf(topic string, start map[int32]int64) kadm.Offsets {
	os := kadm.Offsets{}
	for p, o := range start {
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: o, LeaderEpoch: -1})
	}
	return os
}
