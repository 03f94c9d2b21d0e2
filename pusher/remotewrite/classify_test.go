package remotewrite

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ferrylabs/ferry/pusher/backend"
)

// outcome is what a Push should come to: the pusher's ack class, and for
// server errors the retry-after hint.
type outcome int

const (
	ok outcome = iota
	clientError
	serverError
)

func (o outcome) String() string {
	return [...]string{"OK", "CLIENT_ERROR", "SERVER_ERROR"}[o]
}

func outcomeOf(err error) outcome {
	switch {
	case err == nil:
		return ok
	case backend.IsClientError(err):
		return clientError
	default:
		return serverError
	}
}

// TestClassification drives one Push against a receiver scripted to
// answer one way, and checks the answer class, the retry-after hint and
// the reason, as Prometheus's remote-write client would decide.
func TestClassification(t *testing.T) {
	t.Parallel()
	reply := func(code int, body string, header ...string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			for i := 0; i+1 < len(header); i += 2 {
				w.Header().Set(header[i], header[i+1])
			}
			w.WriteHeader(code)
			_, _ = w.Write([]byte(body))
		}
	}
	for _, tc := range []struct {
		name       string
		handler    http.HandlerFunc
		want       outcome
		retryAfter time.Duration // checked for server errors; 0 is no hint
		reason     string        // must be in the error's text
		code       string        // the metrics' code label
	}{
		{name: "200 is OK", handler: reply(200, ""), want: ok, code: "200"},
		{name: "204 is OK", handler: reply(204, ""), want: ok, code: "204"},
		{name: "400 is a client error with the receiver's message", handler: reply(400, "out of order sample\n"), want: clientError, reason: "400 Bad Request: out of order sample", code: "400"},
		{name: "409 is a client error", handler: reply(409, "duplicate sample for timestamp"), want: clientError, reason: "duplicate sample", code: "409"},
		{name: "413 is a client error", handler: reply(413, "too big"), want: clientError, reason: "413", code: "413"},
		{name: "422 is a client error", handler: reply(422, "unprocessable"), want: clientError, reason: "422", code: "422"},
		{name: "a long message is truncated", handler: reply(400, strings.Repeat("x", 5000)), want: clientError, reason: strings.Repeat("x", maxMessageBytes) + " [truncated]", code: "400"},
		{name: "429 without Retry-After is a server error without a hint", handler: reply(429, "slow down"), want: serverError, reason: "429", code: "429"},
		{name: "429 with Retry-After in seconds carries the hint", handler: reply(429, "", "Retry-After", "3"), want: serverError, retryAfter: 3 * time.Second, code: "429"},
		{name: "429 with Retry-After as an HTTP date carries the hint", handler: func(w http.ResponseWriter, _ *http.Request) {
			// Dated when answering: the subtests wait for each other.
			w.Header().Set("Retry-After", time.Now().Add(7*time.Second).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusTooManyRequests)
		}, want: serverError, retryAfter: 7 * time.Second, code: "429"},
		{name: "500 is a server error", handler: reply(500, "storage failed"), want: serverError, reason: "500 Internal Server Error: storage failed", code: "500"},
		{name: "503 with Retry-After is a server error with the hint", handler: reply(503, "", "Retry-After", "2"), want: serverError, retryAfter: 2 * time.Second, code: "503"},
		{name: "a redirect is not followed and is a server error naming the target", handler: reply(307, "", "Location", "https://elsewhere/api/v1/push"), want: serverError, reason: "https://elsewhere/api/v1/push", code: "307"},
		{name: "an answer later than the timeout is a server error", handler: func(_ http.ResponseWriter, r *http.Request) {
			// Reading the body first lets the server notice the client
			// hang up, which ends the request's context.
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		}, want: serverError, reason: "-remote-write.timeout", code: "timeout"},
		{name: "a connection closed without an answer is a server error", handler: func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}, want: serverError, reason: "request failed", code: "error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(tc.handler)
			t.Cleanup(srv.Close)
			cfg := testConfig(srv.URL)
			cfg.Timeout = 300 * time.Millisecond
			c, reg := newTestClient(t, cfg)
			req := testRequest()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := c.Push(ctx, "tenant-a", req)
			if got := outcomeOf(err); got != tc.want {
				t.Fatalf("Push returned %v (%v), want %v", got, err, tc.want)
			}
			if tc.reason != "" && !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("reason %q does not contain %q", err.Error(), tc.reason)
			}
			checkResult(t, tc.want, res, backend.Count(req))
			if tc.want == serverError {
				var se *backend.ServerError
				if !errors.As(err, &se) {
					t.Fatalf("server error %T is not a *backend.ServerError", err)
				}
				// An HTTP date has one-second resolution.
				if d := se.RetryAfter - tc.retryAfter; d < -time.Second || d > 0 {
					t.Errorf("RetryAfter = %s, want %s", se.RetryAfter, tc.retryAfter)
				}
			}
			if got := counterValue(t, reg, "ferry_pusher_remote_write_requests_total", tc.code); got != 1 {
				t.Errorf("requests_total{code=%q} = %v, want 1", tc.code, got)
			}
			wantRetries := 0.0
			if tc.want == serverError {
				wantRetries = 1
			}
			if got := counterValue(t, reg, "ferry_pusher_remote_write_retries_signalled_total", ""); got != wantRetries {
				t.Errorf("retries_signalled_total = %v, want %v", got, wantRetries)
			}
		})
	}
}

func checkResult(t *testing.T, want outcome, res backend.Result, n int64) {
	t.Helper()
	var exp backend.Result
	switch want {
	case ok:
		exp = backend.Result{Accepted: n}
	case clientError:
		exp = backend.Result{Rejected: n}
	}
	if res != exp {
		t.Errorf("Result = %+v, want %+v", res, exp)
	}
}

// TestRefusedConnectionIsServerError covers a receiver that is down: no
// listener at all on the address.
func TestRefusedConnectionIsServerError(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	c, _ := newTestClient(t, testConfig("http://"+addr+"/api/v1/write"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = c.Push(ctx, "t", testRequest())
	if outcomeOf(err) != serverError {
		t.Fatalf("Push to a closed port returned %v, want a server error", err)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, value string
		want        time.Duration
	}{
		{"an empty header is no hint", "", 0},
		{"seconds are a hint", "12", 12 * time.Second},
		{"zero seconds are no hint", "0", 0},
		{"negative seconds are no hint", "-5", 0},
		{"a huge number of seconds is capped", "99999999999999", maxRetryAfter},
		{"an HTTP date in the future is the time until it", now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{"an HTTP date in the past is no hint", now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{"a date days ahead is capped", now.Add(72 * time.Hour).Format(http.TimeFormat), maxRetryAfter},
		{"garbage is no hint", "soon", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := retryAfter(tc.value, now); got != tc.want {
				t.Errorf("retryAfter(%q) = %s, want %s", tc.value, got, tc.want)
			}
		})
	}
}

func TestMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, body, want string }{
		{"an empty body says so", "", "(no message)"},
		{"line breaks and runs of spaces become single spaces", "a\n  b\r\nc\n", "a b c"},
		{"invalid UTF-8 is replaced", "bad \xff byte", "bad \uFFFD byte"},
		{"a multi-byte rune at the cut is dropped whole", strings.Repeat("a", maxMessageBytes-1) + "é" + "tail", strings.Repeat("a", maxMessageBytes-1) + " [truncated]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := message(strings.NewReader(tc.body)); got != tc.want {
				t.Errorf("message(%q) = %q, want %q", tc.body, got, tc.want)
			}
		})
	}
}
