package pusher

import (
	"context"
	"log/slog"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// unaryCallLog logs each finished unary call (PushOne, Sync, health and
// reflection calls) through go-grpc-middleware's logging interceptor, at
// debug level unless its code makes it a warning or an error (see
// eventLogger).
//
// The middleware builds every field of the line (method, peer, start time,
// code, duration) before it hands the line to the logger, which then drops
// it below the logger's level: about fifty allocations per call, paid by
// every PushOne at the default info level for nothing. So unless the logger
// takes debug lines, the call runs without the middleware, and only a call
// whose outcome is logged at the logger's level goes through it afterwards,
// with its result: the line is the one the middleware would have written,
// its start time and duration those of the real call (see callTiming).
func unaryCallLog(l *slog.Logger) grpc.UnaryServerInterceptor {
	full := logging.UnaryServerInterceptor(eventLogger(l),
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithFieldsFromContext(callTimingFields))
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if l.Enabled(ctx, slog.LevelDebug) {
			return full(ctx, req, info, handler)
		}
		start := time.Now()
		resp, err := handler(ctx, req)
		level := slogLevel(logging.DefaultServerCodeToLevel(status.Code(err)))
		if !l.Enabled(ctx, level) {
			return resp, err
		}
		ctx = context.WithValue(ctx, callTimingKey{}, callTiming{start: start, took: time.Since(start)})
		return full(ctx, req, info, func(context.Context, any) (any, error) { return resp, err })
	}
}

// callTiming is when a call that unaryCallLog logs after the fact started
// and how long it took: the middleware, which sees only the replay, would
// otherwise log the replay's.
type callTiming struct {
	start time.Time
	took  time.Duration
}

type callTimingKey struct{}

// callTimingFields gives the middleware the real call's start time and
// duration under its own keys: fields from the context take precedence over
// the ones it computes.
func callTimingFields(ctx context.Context) logging.Fields {
	t, ok := ctx.Value(callTimingKey{}).(callTiming)
	if !ok {
		return nil
	}
	return append(logging.Fields{"grpc.start_time", t.start.Format(time.RFC3339)}, logging.DefaultDurationToFields(t.took)...)
}

// eventLogger adapts slog to the middleware's logger, at debug level for
// routine calls so a busy pusher does not log every stream.
func eventLogger(l *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		l.Log(ctx, slogLevel(lvl), msg, fields...)
	})
}

// slogLevel is the level a line of the middleware's level lvl is logged at:
// debug below warnings.
func slogLevel(lvl logging.Level) slog.Level {
	if lvl < logging.LevelWarn {
		return slog.LevelDebug
	}
	return slog.Level(lvl)
}
