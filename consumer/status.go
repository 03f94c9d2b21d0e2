package consumer

import (
	"fmt"
	"strconv"
	"time"

	"github.com/ferrylabs/ferry/internal/statuspage"
)

// StatusPage is what the consumer's HTTP port shows at /: readiness, the
// stream, and per partition how far behind it is, and which tenants are
// being retried (the first thing to look at when the lag grows).
func (c *Consumer) StatusPage() statuspage.Page {
	now := time.Now()
	ready := "yes"
	readyErr := c.Ready()
	if readyErr != nil {
		ready = "no: " + readyErr.Error()
	}
	stream := "open"
	if !c.sender.ready.Load() {
		stream = "down"
	}
	records, bytes := c.lanes.Usage()
	st := c.Stats()
	page := statuspage.Page{
		Title: "ferry-consumer " + c.cfg.InstanceID,
		Facts: []statuspage.Fact{
			{Name: "ready", Value: ready, Bad: readyErr != nil},
			{Name: "topic", Value: c.cfg.Topic},
			{Name: "consumer group", Value: c.cfg.ConsumerGroup},
			{Name: "pusher", Value: c.cfg.PusherAddress + " (stream " + stream + ")", Bad: stream != "open"},
			{Name: "in flight", Value: fmt.Sprintf("%d records, %s of %d records, %s", records, statuspage.Bytes(int64(bytes)),
				c.cfg.MaxInflightRequests, statuspage.Bytes(int64(c.cfg.MaxInflightBytes)))},
			{Name: "answers", Value: fmt.Sprintf("ok %d, client errors %d (skipped %d), server errors %d, stream errors %d",
				st.Acks["ok"], st.Acks["client_error"], st.Skipped, st.Acks["server_error"], st.Acks["stream_error"])},
		},
		Generated: now,
	}
	page.Sections = append(page.Sections, c.partitionSection(now), c.retryingSection(now))
	return page
}

// partitionSection is the table of the owned partitions.
func (c *Consumer) partitionSection(now time.Time) statuspage.Section {
	sec := statuspage.Section{
		Title:   "Partitions",
		Note:    "lag = end − committed offset; oldest unacked = age of the oldest record fetched and not yet acknowledged",
		Columns: []string{"partition", "committed", "end", "lag (records)", "oldest unacked", "in flight"},
		Empty:   "start offsets not loaded from Kafka yet",
	}
	for _, pl := range c.Lags(now) {
		sec.Rows = append(sec.Rows, statuspage.Row{
			Cells: []string{strconv.Itoa(int(pl.Partition)), strconv.FormatInt(pl.Committed, 10), strconv.FormatInt(pl.End, 10),
				strconv.FormatInt(pl.Records, 10), statuspage.Age(pl.OldestUnacked), strconv.Itoa(pl.Pending)},
			Bad: c.cfg.MaxLagAtStartup > 0 && pl.OldestUnacked > c.cfg.MaxLagAtStartup,
		})
	}
	return sec
}

// retryingSection is the table of the tenants being retried, the longest
// first.
func (c *Consumer) retryingSection(now time.Time) statuspage.Section {
	sec := statuspage.Section{
		Title:   "Retrying tenants",
		Note:    "tenants whose requests got server errors or were lost with a stream, and have not had one acknowledged since",
		Columns: []string{"tenant", "retrying for", "since"},
		Empty:   "no tenant is being retried",
	}
	for _, r := range c.lanes.Retrying() {
		sec.Rows = append(sec.Rows, statuspage.Row{
			Cells: []string{r.Tenant, statuspage.Age(now.Sub(r.Since)), r.Since.UTC().Format(time.DateTime)},
			Bad:   now.Sub(r.Since) > time.Minute,
		})
	}
	return sec
}
