package consumer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
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
//     (cause topic_deleted, up to the end offset of the last fetch), the
//     re-creation counted and logged, and the new topic read from its log
//     start offset with a new tracker.
//
// Every commit carries the topic's ID in its metadata (commitMetadata), so
// a consumer that starts after a re-creation and finds an offset committed
// for the old topic (a commit that landed after Kafka deleted the group's
// offsets with the topic) reads the new topic from its start too, and says
// so (staleCommit).
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
	return err == nil && id != (kadm.TopicID{}) && id != r.currentID()
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
	oldID, fetched := c.reader.currentID(), maps.Clone(c.reader.next)
	start, err := c.reader.newTopicStart(ctx, c.committer.commitOffsets)
	if err != nil {
		return nil, err
	}
	for old.pending() > 0 {
		sleep(ctx, 20*time.Millisecond)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	// The last fetches' end offsets, not the listed ones: the client
	// fetched the old topic to the end, while a listing may already have
	// read the new topic's.
	ends := c.stats.highWatermarks()
	for _, p := range c.owned {
		if ends[p] > fetched[p] {
			c.reader.lost(p, lostTopicDeleted, fetched[p], ends[p], -1)
		}
	}
	c.metrics.recreations.Inc()
	c.logger.Error("topic deleted and re-created: reading the new topic from its start",
		"old_topic_id", oldID, "new_topic_id", c.reader.currentID(), "start", start)
	c.report.lag.reset()
	c.stats.resetHighWatermarks()
	c.committer.skipInitial(start, c.reader.commitMetadata())
	c.tracker.Store(newTracker(start))
	c.following.Store(false)
	return start, nil
}

// newTopicStart reads the re-created topic's ID and log start offsets,
// retrying while Kafka does not answer, and commits them with commit.
func (r *reader) newTopicStart(ctx context.Context, commit func(context.Context, kadm.Offsets) error) (map[int32]int64, error) {
	for attempt := 0; ; attempt++ {
		start, err := r.listNewTopicStart(ctx)
		if err == nil {
			if err = commit(ctx, offsetsOf(r.cfg.Topic, start, r.commitMetadata())); err == nil {
				return start, nil
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		delay := r.backoff.Delay(attempt, 0)
		r.logger.Warn("topic re-created: its start offsets are not committed yet, retrying", "err", err, "retry_in", delay.Round(time.Millisecond))
		sleep(ctx, delay)
	}
}

// listNewTopicStart lists the topic's ID and its owned partitions' log
// start offsets.
func (r *reader) listNewTopicStart(ctx context.Context) (map[int32]int64, error) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	id, err := r.currentTopicID(lctx)
	if err != nil {
		return nil, err
	}
	starts, err := r.admin.ListStartOffsets(lctx, r.cfg.Topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %q: %w", r.cfg.Topic, err)
	}
	start := make(map[int32]int64, len(r.owned))
	for _, p := range r.owned {
		o, ok := starts.Lookup(r.cfg.Topic, p)
		if !ok {
			return nil, fmt.Errorf("%w: topic %q has no partition %d", ErrPartitionNotFound, r.cfg.Topic, p)
		}
		start[p] = o.Offset
	}
	r.topicID.Store(&id)
	return start, nil
}

// offsetsOf returns start as offsets of topic to commit, with metadata.
func offsetsOf(topic string, start map[int32]int64, metadata string) kadm.Offsets {
	os := kadm.Offsets{}
	for p, o := range start {
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: o, LeaderEpoch: -1, Metadata: metadata})
	}
	return os
}

// currentID is the ID of the topic being read, zero before the start
// offsets are known.
func (r *reader) currentID() kadm.TopicID {
	if id := r.topicID.Load(); id != nil {
		return *id
	}
	return kadm.TopicID{}
}

// commitMetadataPrefix starts the metadata the consumer commits beside an
// offset: the topic ID it belongs to.
const commitMetadataPrefix = "ferry topic-id="

// commitMetadata is the metadata of a commit of the topic being read: its
// ID, so that a restarted consumer can tell an offset of an earlier topic
// of the same name (staleCommit). Kafka deletes a group's offsets with
// their topic, but a commit that lands after the deletion (records
// acknowledged meanwhile, or the final commit of a consumer stopped then)
// would otherwise be applied to the re-created topic. Empty while the ID
// is unknown (brokers before Kafka 2.8).
func (r *reader) commitMetadata() string {
	if id := r.currentID(); id != (kadm.TopicID{}) {
		return commitMetadataPrefix + id.String()
	}
	return ""
}

// staleCommit reports, and logs, whether partition p's committed offset
// belongs to an earlier topic of the same name than the topic with ID id.
// An offset committed without Ferry's metadata (an older version, another
// tool) is taken as it is.
func (r *reader) staleCommit(p int32, o kadm.Offset, id kadm.TopicID) bool {
	if !strings.HasPrefix(o.Metadata, commitMetadataPrefix) || id == (kadm.TopicID{}) || o.Metadata == commitMetadataPrefix+id.String() {
		return false
	}
	r.metrics.recreations.Inc()
	r.logger.Error("the committed offset belongs to a deleted topic of the same name: reading the re-created topic from its start",
		"partition", p, "committed", o.At, "committed_topic_id", strings.TrimPrefix(o.Metadata, commitMetadataPrefix), "topic_id", id)
	return true
}
