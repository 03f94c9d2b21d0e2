package remotewrite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ferrylabs/ferry/pusher/backend"
)

// maxMessageBytes bounds the part of a receiver's error body put in a
// CLIENT_ERROR's reason: enough for Mimir's and Prometheus's messages,
// which name the series first, and small enough for a log line and an ack.
const maxMessageBytes = 256

// maxDrainBytes bounds how much of an answer's body is read so that its
// connection can be reused. A receiver that sends more gets its connection
// closed instead: an endless body must not hold a request.
const maxDrainBytes = 64 << 10

// classify turns the receiver's answer to one request, or the error that
// stood for an answer, into the error Push returns, as Prometheus's own
// remote-write client decides retries:
//
//   - 2xx: applied, nil.
//   - 4xx but 429: the receiver refuses the content (bad labels, out of
//     order, too old, over a limit); sending it again cannot succeed, so a
//     *backend.ClientError with the receiver's message, and the consumer
//     moves on.
//   - 429, 5xx: the receiver is overloaded or failing; a *backend.ServerError
//     with its Retry-After as the hint, and the consumer retries.
//   - no answer (timeout, refused or reset connection): a
//     *backend.ServerError, retried.
//   - anything else, 3xx in particular: a *backend.ServerError. Redirects
//     are not followed (see newTransport's caller); a redirect means
//     -remote-write.url is wrong, and retrying until an operator fixes it
//     loses nothing, where skipping would drop every request meanwhile.
//
// It closes resp's body.
func classify(resp *http.Response, err error, now time.Time) error {
	if err != nil {
		return &backend.ServerError{Reason: "remote write: " + describe(err), Cause: err}
	}
	defer func() { _ = resp.Body.Close() }()
	code := resp.StatusCode
	switch {
	case code/100 == 2:
		drain(resp.Body)
		return nil
	case code/100 == 4 && code != http.StatusTooManyRequests:
		msg := message(resp.Body)
		return backend.NewClientError("remote write: receiver answered %s: %s", resp.Status, msg)
	case code == http.StatusTooManyRequests || code/100 == 5:
		msg := message(resp.Body)
		return &backend.ServerError{
			Reason:     fmt.Sprintf("remote write: receiver answered %s: %s", resp.Status, msg),
			RetryAfter: retryAfter(resp.Header.Get("Retry-After"), now),
		}
	case code/100 == 3:
		drain(resp.Body)
		return &backend.ServerError{Reason: fmt.Sprintf(
			"remote write: receiver answered %s to %s: redirects are not followed, fix -remote-write.url",
			resp.Status, redactURL(resp.Header.Get("Location")))}
	default:
		drain(resp.Body)
		return &backend.ServerError{Reason: "remote write: receiver answered unexpected " + resp.Status}
	}
}

// describe names a transport error for a reason string. The request's URL,
// which http.Client puts in its errors, is left out: it is in the
// configuration, and the reason travels to the consumer's logs.
func describe(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return "no answer within -remote-write.timeout: " + err.Error()
	case errors.Is(err, context.Canceled):
		return "request canceled: " + err.Error()
	default:
		return "request failed: " + err.Error()
	}
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// message reads the start of an error answer's body for a reason: at most
// maxMessageBytes, valid UTF-8, on one line. The rest is drained.
func message(body io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(body, maxMessageBytes+1))
	truncated := len(b) > maxMessageBytes
	if truncated {
		b = b[:maxMessageBytes]
		// Do not cut a rune in two.
		for len(b) > 0 && !utf8.Valid(b) {
			b = b[:len(b)-1]
		}
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		s = "(no message)"
	}
	if truncated {
		s += " [truncated]"
		drain(body)
	}
	return s
}

// drain reads what is left of a body, up to maxDrainBytes, so that the
// connection goes back to the pool.
func drain(body io.Reader) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxDrainBytes))
}

// retryAfter parses a Retry-After header: delay-seconds or an HTTP date
// (RFC 9110 10.2.3). A missing, malformed or past value gives 0, which
// leaves the pusher's default hint in place.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs > int64(maxRetryAfter/time.Second) {
			return maxRetryAfter // before multiplying: it could overflow
		}
		return clampRetryAfter(time.Duration(secs) * time.Second)
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	return clampRetryAfter(t.Sub(now))
}

// maxRetryAfter caps a receiver's hint: a misconfigured receiver asking
// for a day must not stall a tenant for a day. The consumer's own backoff
// still applies on top.
const maxRetryAfter = 5 * time.Minute

func clampRetryAfter(d time.Duration) time.Duration {
	return min(max(d, 0), maxRetryAfter)
}
