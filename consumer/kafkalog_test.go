package consumer

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTheKafkaClientLogsAtWarnAtMost: franz-go's info and debug lines stay
// out of the log whatever -log.level says, its warnings and errors reach
// it, and an error-only log keeps out its warnings too.
func TestTheKafkaClientLogsAtWarnAtMost(t *testing.T) {
	for _, tc := range []struct {
		handler slog.Level
		want    kgo.LogLevel
	}{
		{slog.LevelDebug, kgo.LogLevelWarn},
		{slog.LevelInfo, kgo.LogLevelWarn},
		{slog.LevelWarn, kgo.LogLevelWarn},
		{slog.LevelError, kgo.LogLevelError},
	} {
		var buf bytes.Buffer
		l := kafkaLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: tc.handler})))
		if got := l.Level(); got != tc.want {
			t.Errorf("log level %s: the kafka client logs at %s, want %s", tc.handler, got, tc.want)
		}
		l.Log(kgo.LogLevelError, "broker gone", "broker", 1)
		if line := buf.String(); !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "component=kafka") || !strings.Contains(line, "broker=1") {
			t.Errorf("log level %s: the kafka client's error was logged as %q", tc.handler, line)
		}
	}
}
