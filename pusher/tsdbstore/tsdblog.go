package tsdbstore

import (
	"context"
	"log/slog"
)

// debugInfoHandler logs a TSDB's info lines at debug: every tenant's open
// and WAL replay would otherwise flood the log of a pusher with many
// tenants. Warnings and errors keep their level.
type debugInfoHandler struct{ slog.Handler }

func (h debugInfoHandler) Enabled(ctx context.Context, l slog.Level) bool {
	if l == slog.LevelInfo {
		l = slog.LevelDebug
	}
	return h.Handler.Enabled(ctx, l)
}

func (h debugInfoHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo {
		r.Level = slog.LevelDebug
	}
	return h.Handler.Handle(ctx, r)
}

func (h debugInfoHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return debugInfoHandler{h.Handler.WithAttrs(as)}
}

func (h debugInfoHandler) WithGroup(name string) slog.Handler {
	return debugInfoHandler{h.Handler.WithGroup(name)}
}

// tsdbLogger is the logger of tenant's DB, its info lines at debug.
func (s *Store) tsdbLogger(tenant string) *slog.Logger {
	return slog.New(debugInfoHandler{s.logger.Handler()}).With("tenant", tenant)
}
