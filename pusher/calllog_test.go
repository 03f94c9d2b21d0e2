package pusher

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var syncInfo = &grpc.UnaryServerInfo{FullMethod: "/" + serviceName + "/Sync"}

// logLines runs one call through unaryCallLog with a logger at level and
// returns the lines it logged.
func logLines(t *testing.T, level slog.Level, handler grpc.UnaryHandler) []string {
	t.Helper()
	var logs bytes.Buffer
	intercept := unaryCallLog(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: level})))
	if _, err := intercept(context.Background(), struct{}{}, syncInfo, handler); err != nil {
		if _, ok := status.FromError(err); !ok {
			t.Fatalf("the interceptor changed the handler's error: %v", err)
		}
	}
	if logs.Len() == 0 {
		return nil
	}
	return strings.Split(strings.TrimSpace(logs.String()), "\n")
}

// field returns the value of key in a text log line, and how many times the
// key occurs.
func field(line, key string) (string, int) {
	var val string
	n := 0
	for f := range strings.FieldsSeq(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			val, n = v, n+1
		}
	}
	return val, n
}

// TestUnaryCallLogLevels: routine calls are debug lines, failed calls are
// warnings or errors by their code, as go-grpc-middleware maps them, whether
// or not the logger takes debug lines.
func TestUnaryCallLogLevels(t *testing.T) {
	ok := func(context.Context, any) (any, error) { return struct{}{}, nil }
	unavailable := func(context.Context, any) (any, error) {
		return nil, status.Error(codes.Unavailable, "pusher: sync: fsync: input/output error")
	}
	internal := func(context.Context, any) (any, error) {
		return nil, status.Error(codes.Internal, "pusher: internal error")
	}
	for _, tc := range []struct {
		name    string
		level   slog.Level
		handler grpc.UnaryHandler
		want    string // the line's level, "" for no line
		code    string
	}{
		{"should not log a routine call at info level", slog.LevelInfo, ok, "", ""},
		{"should log a routine call at debug level", slog.LevelDebug, ok, "DEBUG", "OK"},
		{"should log an unavailable call as a warning at info level", slog.LevelInfo, unavailable, "WARN", "Unavailable"},
		{"should log an unavailable call as a warning at debug level", slog.LevelDebug, unavailable, "WARN", "Unavailable"},
		{"should log an internal error as an error at info level", slog.LevelInfo, internal, "ERROR", "Internal"},
		{"should not log a warning at error level", slog.LevelError, unavailable, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := logLines(t, tc.level, tc.handler)
			if tc.want == "" {
				if len(lines) != 0 {
					t.Fatalf("logged %q, want nothing", lines)
				}
				return
			}
			if len(lines) != 1 {
				t.Fatalf("logged %q, want one line", lines)
			}
			l := lines[0]
			if lvl, _ := field(l, "level"); lvl != tc.want {
				t.Errorf("level %s, want %s: %s", lvl, tc.want, l)
			}
			if !strings.Contains(l, `msg="finished call"`) {
				t.Errorf("not the middleware's line: %s", l)
			}
			for key, want := range map[string]string{
				"grpc.code": tc.code, "grpc.service": serviceName, "grpc.method": "Sync",
				"grpc.method_type": "unary", "grpc.component": "server",
			} {
				if got, n := field(l, key); got != want || n != 1 {
					t.Errorf("%s=%s (%d times), want %s once: %s", key, got, n, want, l)
				}
			}
			for _, key := range []string{"grpc.start_time", "grpc.time_ms"} {
				if _, n := field(l, key); n != 1 {
					t.Errorf("%s occurs %d times, want once: %s", key, n, l)
				}
			}
		})
	}
}

// TestUnaryCallLogTimesTheRealCall: a failed call logged after the fact
// (the logger does not take debug lines) carries the start and duration of
// the call, not of the middleware's replay of its result.
func TestUnaryCallLogTimesTheRealCall(t *testing.T) {
	const took = 30 * time.Millisecond
	before := time.Now().Truncate(time.Second) // the line's start time is RFC 3339, to the second
	lines := logLines(t, slog.LevelInfo, func(context.Context, any) (any, error) {
		time.Sleep(took) // the duration under test
		return nil, status.Error(codes.Unavailable, "pusher: sync: slow and failing")
	})
	after := time.Now()
	if len(lines) != 1 {
		t.Fatalf("logged %q, want one line", lines)
	}
	ms, _ := field(lines[0], "grpc.time_ms")
	if d, err := strconv.ParseFloat(strings.Trim(ms, `"`), 64); err != nil || d < float64(took.Milliseconds()) {
		t.Errorf("grpc.time_ms=%s, want at least %d: %s", ms, took.Milliseconds(), lines[0])
	}
	st, _ := field(lines[0], "grpc.start_time")
	start, err := time.Parse(time.RFC3339, strings.Trim(st, `"`))
	if err != nil || start.Before(before) || start.After(after) {
		t.Errorf("grpc.start_time=%s, want within the call (%s..%s): %s", st, before.Format(time.RFC3339), after.Format(time.RFC3339), lines[0])
	}
}

// TestUnaryCallLogKeepsTheResult: the interceptor returns what the handler
// returned, logged or not.
func TestUnaryCallLogKeepsTheResult(t *testing.T) {
	want := status.Error(codes.Unavailable, "pusher: shutting down")
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelError} {
		intercept := unaryCallLog(slog.New(slog.NewTextHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: level})))
		resp, err := intercept(context.Background(), 1, syncInfo, func(_ context.Context, req any) (any, error) { return req.(int) + 1, want })
		if resp != 2 || !errors.Is(err, want) {
			t.Errorf("at %s: got %v, %v; want 2, %v", level, resp, err, want)
		}
	}
}

// TestUnaryCallLogAllocatesNothingForRoutineCalls: at the default level a
// successful call, every PushOne, costs the logging nothing. The
// middleware alone builds its line's fields first: about fifty allocations.
func TestUnaryCallLogAllocatesNothingForRoutineCalls(t *testing.T) {
	intercept := unaryCallLog(slog.New(slog.NewTextHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: slog.LevelInfo})))
	ctx := context.Background()
	var resp any = &struct{}{}
	handler := func(context.Context, any) (any, error) { return resp, nil }
	if n := testing.AllocsPerRun(100, func() { _, _ = intercept(ctx, resp, syncInfo, handler) }); n != 0 {
		t.Errorf("%.0f allocations per call, want 0", n)
	}
}
