package consumer

import (
	"fmt"
	"strconv"
	"time"

	"github.com/ferrylabs/ferry/internal/statuspage"
)

// statusPage is what the consumer's HTTP port shows at /: readiness, the
// stream, and per partition how far behind it is, and which tenants are
// being retried (the first thing to look at when the lag grows).
func (r *reporter) statusPage() statuspage.Page {
	now := time.Now()
	ready := "yes"
	readyErr := r.ready()
	if readyErr != nil {
		ready = "no: " + readyErr.Error()
	}
	stream := "open"
	if !r.streamUp() {
		stream = "down"
	}
	records, bytes := r.usage()
	st := r.stats()
	page := statuspage.Page{
		Title: "ferry-consumer " + r.cfg.InstanceID,
		Facts: []statuspage.Fact{
			{Name: "ready", Value: ready, Bad: readyErr != nil},
			{Name: "topic", Value: r.cfg.Topic},
			{Name: "consumer group", Value: r.cfg.ConsumerGroup},
			{Name: "pusher", Value: r.cfg.PusherAddress + " (stream " + stream + ")", Bad: stream != "open"},
			{Name: "in flight", Value: fmt.Sprintf("%d records, %s of %d records, %s", records, statuspage.Bytes(int64(bytes)),
				r.cfg.MaxInflightRequests, statuspage.Bytes(int64(r.cfg.MaxInflightBytes)))},
			{Name: "answers", Value: fmt.Sprintf("ok %d, client errors %d (skipped %d), server errors %d, stream errors %d",
				st.Acks["ok"], st.Acks["client_error"], st.Skipped, st.Acks["server_error"], st.Acks["stream_error"])},
		},
		Generated: now,
	}
	page.Sections = append(page.Sections, r.partitionSection(now), r.retryingSection(now))
	return page
}

// partitionSection is the table of the owned partitions.
func (r *reporter) partitionSection(now time.Time) statuspage.Section {
	sec := statuspage.Section{
		Title:   "Partitions",
		Note:    "lag = end − committed offset; oldest unacked = age of the oldest record fetched and not yet acknowledged",
		Columns: []string{"partition", "committed", "end", "lag (records)", "oldest unacked", "in flight"},
		Empty:   "start offsets not loaded from Kafka yet",
	}
	for _, pl := range r.lags(now) {
		sec.Rows = append(sec.Rows, statuspage.Row{
			Cells: []string{strconv.Itoa(int(pl.Partition)), strconv.FormatInt(pl.Committed, 10), strconv.FormatInt(pl.End, 10),
				strconv.FormatInt(pl.Records, 10), statuspage.Age(pl.OldestUnacked), strconv.Itoa(pl.Pending)},
			Bad: r.cfg.MaxLagAtStartup > 0 && pl.OldestUnacked > r.cfg.MaxLagAtStartup,
		})
	}
	return sec
}

// retryingSection is the table of the tenants being retried, the longest
// first.
func (r *reporter) retryingSection(now time.Time) statuspage.Section {
	sec := statuspage.Section{
		Title:   "Retrying tenants",
		Note:    "tenants whose requests got server errors or were lost with a stream, and have not had one acknowledged since",
		Columns: []string{"tenant", "retrying for", "since"},
		Empty:   "no tenant is being retried",
	}
	for _, r := range r.retrying() {
		sec.Rows = append(sec.Rows, statuspage.Row{
			Cells: []string{r.Tenant, statuspage.Age(now.Sub(r.Since)), r.Since.UTC().Format(time.DateTime)},
			Bad:   now.Sub(r.Since) > time.Minute,
		})
	}
	return sec
}
