package deploytest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// promtool returns the path of promtool, skipping the test when it is
// missing, except under CI=true where a missing tool fails.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool is required under CI (Debian package prometheus): %v", err)
		}
		t.Skipf("promtool not found (install Debian's prometheus package): %v", err)
	}
	return p
}

func TestPromtoolAcceptsTheRulesAndTheirUnitTests(t *testing.T) {
	t.Parallel()
	tool := promtool(t)
	dir := filepath.Join(repoRoot(t), "deploy", "prometheus")
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"the rules should pass promtool check rules", []string{"check", "rules", "ferry.rules.yml"}},
		{"every alert should fire and stay silent as its unit tests expect", []string{"test", "rules", "tests/ferry.rules.test.yml"}},
		{"the compose stack's Prometheus configuration should be valid", []string{"check", "config", "--syntax-only", "../compose/prometheus.yml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, tool, tc.args...)
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("promtool %v: %v\n%s", tc.args, err, out)
			}
		})
	}
}
