package lane

import (
	"context"
	"log/slog"
	"time"

	"github.com/ferrylabs/ferry/internal/backoff"
)

// Sender pushes requests. A lane's requests in flight share one stream: a
// request sent on a new stream while earlier ones died with the old could
// be applied before them.
type Sender interface {
	// Send sends the request for it, with sequence number seq, and returns
	// without waiting for the answer. prev is the lane's oldest request in
	// flight, nil when there is none: the request then goes on the open
	// stream (waiting a moment for one), and Send never returns nil (a
	// request it could not send is a Call whose Wait fails). Otherwise it goes on prev's
	// stream, and Send returns nil without sending when that stream is no
	// longer the open one.
	Send(ctx context.Context, prev Call, it *Item, seq uint64) Call
}

// Call is one request sent, waiting for its answer.
type Call interface {
	// Wait returns the answer. An error means the request's fate is
	// unknown: its stream broke, or no stream was open. When wake is
	// ready first, Wait returns woken true instead, with neither an
	// answer nor an error: the call still waits, and Wait may be called
	// again (a nil wake never is ready). The lane wakes that way to send
	// its next record once validated, and a new record while one request
	// is in flight, without waiting for an answer.
	Wait(ctx context.Context, wake <-chan struct{}) (a Answer, woken bool, err error)
}

// Status is the pusher's verdict on one request.
type Status int

// The statuses of an answer; see docs/design.md, "Ack".
const (
	// OK: applied.
	OK Status = iota
	// ClientError: retrying cannot help; the record is skipped.
	ClientError
	// ServerError: not applied now; the request is retried, never skipped.
	ServerError
)

// Answer is the pusher's answer to one request.
type Answer struct {
	Status Status
	Reason string
	// RetryAfter is the pusher's hint for a server error: back off at
	// least this long (up to the backoff's maximum).
	RetryAfter time.Duration
}

// Rereader reads the values of parked records from Kafka again.
type Rereader interface {
	// Reread returns the values of the records at offsets of partition p.
	// An offset missing from the map is no longer in the log.
	Reread(ctx context.Context, p int32, offsets []int64) (map[int64][]byte, error)
}

// RereadFunc is a Rereader made of a function.
type RereadFunc func(ctx context.Context, p int32, offsets []int64) (map[int64][]byte, error)

// Reread calls f.
func (f RereadFunc) Reread(ctx context.Context, p int32, offsets []int64) (map[int64][]byte, error) {
	return f(ctx, p, offsets)
}

// Config holds the lanes' bounds.
type Config struct {
	// InflightPerTenant is how many of a tenant's requests may be in
	// flight at once (-consumer.max-inflight-per-tenant).
	InflightPerTenant int
	// RetryingShare is how many records of a tenant being retried keep
	// their values in memory (-consumer.retrying-tenant-records).
	RetryingShare int
	// WindowRecords and WindowBytes bound the records held in memory, all
	// tenants together (-consumer.max-inflight-requests, -bytes).
	WindowRecords, WindowBytes int
	// Backoff spaces the retries of failed requests and re-reads.
	Backoff backoff.Policy
}

// World is everything the lanes act on. Sender and Rereader are
// required; a nil function does nothing.
type World struct {
	Sender   Sender
	Rereader Rereader
	// Validate sets it.Skip when a re-read record cannot be pushed.
	// Records added by Add are validated by the caller (see Add).
	Validate func(it *Item)
	// Skip handles a client error: it counts, logs and dead-letters the
	// record, and reports false when ctx ended before it could; the item
	// is then left unfinished, so it is not committed past.
	Skip func(ctx context.Context, it *Item, cause, reason string) bool
	// Finish is called once per item acknowledged: answered OK, or
	// skipped. Its offset may be committed from then on.
	Finish func(it *Item)
	// Ack counts an answer by status: ok, client_error, server_error, or
	// stream_error for a request lost with its stream.
	Ack func(status string)
	// Retry counts a request to be sent again, by cause (server_error,
	// stream_error).
	Retry func(cause string)
	// Parked and Reread count records parked and read again.
	Parked, Reread func(n int)
	// Sleep waits for d or until ctx is done; time.Sleep-like by default.
	// Tests pass a fake clock.
	Sleep func(ctx context.Context, d time.Duration)
	// AllowLog rate-limits the log lines of retries; every line by default.
	AllowLog func() bool
	Logger   *slog.Logger
}

// withDefaults fills the functions left nil.
func (w World) withDefaults() World {
	if w.Validate == nil {
		w.Validate = func(*Item) {}
	}
	if w.Skip == nil {
		w.Skip = func(context.Context, *Item, string, string) bool { return true }
	}
	if w.Finish == nil {
		w.Finish = func(*Item) {}
	}
	if w.Ack == nil {
		w.Ack = func(string) {}
	}
	if w.Retry == nil {
		w.Retry = func(string) {}
	}
	if w.Parked == nil {
		w.Parked = func(int) {}
	}
	if w.Reread == nil {
		w.Reread = func(int) {}
	}
	if w.Sleep == nil {
		w.Sleep = Sleep
	}
	if w.AllowLog == nil {
		w.AllowLog = func() bool { return true }
	}
	if w.Logger == nil {
		w.Logger = slog.New(slog.DiscardHandler)
	}
	return w
}

// Sleep waits for d or until ctx is done.
func Sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
