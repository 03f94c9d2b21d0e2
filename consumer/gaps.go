package consumer

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// What Kafka removed before the consumer read it.
//
// Kafka deletes records on its own: retention (retention.ms,
// retention.bytes) drops old segments whether or not a consumer read them,
// and DeleteRecords moves the log start offset by hand. The fetch client
// then answers OFFSET_OUT_OF_RANGE and resets to the log start without
// telling its user, so records are skipped that nothing acknowledged. Ferry
// promises no loss: each such record is counted in
// ferry_consumer_records_lost_total (alerted on by FerryConsumerRecordsLost)
// and each gap logged at error level with its partition and offsets.
//
// A partition's records come in offset order, and the reader knows the
// offset the next one should have (reader.next). A record past it leaves a
// gap, and the fetch that brought it says where the log starts now
// (LogStartOffset). The part of the gap below the log start was deleted
// before it was read (cause "deleted"). The part at or above it is offsets
// still in the log that held no record when fetched. Legitimate gaps are
// told apart there: a transaction's commit or abort marker takes an offset
// too, but the client hands markers over (KeepControlRecords) and they move
// next without leaving a gap; an aborted transaction's records are
// delivered like any other (the isolation level is read-uncommitted). What
// remains was removed by log compaction (cause "compacted"): on Ferry's
// topic that is loss too, since a record's key is its tenant and
// compaction keeps one request per tenant.
//
// Not counted: a log truncated under the consumer (an unclean leader
// election), which franz-go reports as ErrDataLoss without a count of
// records (logged at error level by fetchError); and a deletion that
// leaves a partition empty, counted only once a record follows it or at
// the next start.
//
// A committed offset below the log start found at start-up (the consumer
// was stopped while retention ran) is the same loss, counted before the
// first fetch (deletedBeforeStart). A topic deleted and re-created loses
// what was produced to the old topic and not yet read (recreate.go).

// Causes of ferry_consumer_records_lost_total.
const (
	lostDeleted      = "deleted"
	lostCompacted    = "compacted"
	lostTopicDeleted = "topic_deleted"
)

// inOrder notes rec, fetched in fp, as the partition's latest record,
// counting the offsets between it and the one expected as lost, and reports
// whether rec is a record to dispatch (a transaction marker is not).
func (r *reader) inOrder(fp kgo.FetchPartition, rec *kgo.Record) bool {
	next, ok := r.next[rec.Partition]
	if !ok || rec.Offset < next {
		// Not owned (dispatch refuses it), or read again after a reset
		// the client made (the tracker refuses it): not a gap.
		return !rec.Attrs.IsControl()
	}
	if rec.Offset > next {
		deletedTo := min(rec.Offset, max(next, fp.LogStartOffset))
		if deletedTo > next {
			r.lost(rec.Partition, lostDeleted, next, deletedTo, fp.LogStartOffset)
		}
		if rec.Offset > deletedTo {
			r.lost(rec.Partition, lostCompacted, deletedTo, rec.Offset, fp.LogStartOffset)
		}
	}
	r.next[rec.Partition] = rec.Offset + 1
	return !rec.Attrs.IsControl()
}

// deletedBeforeStart counts the records of partition p from the committed
// offset to the log start offset: deleted while the consumer was stopped.
func (r *reader) deletedBeforeStart(p int32, committed, logStart int64) {
	r.lost(p, lostDeleted, committed, logStart, logStart)
}

// lost counts and logs the offsets [from, to) of partition p as lost.
func (r *reader) lost(p int32, cause string, from, to, logStart int64) {
	r.metrics.lost.WithLabelValues(strconv.Itoa(int(p)), cause).Add(float64(to - from))
	r.logger.Error("records lost: Kafka removed them before this consumer read them",
		"partition", p, "cause", cause, "from_offset", from, "to_offset", to-1, "records", to-from, "log_start_offset", logStart)
}
