package services_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	consumerapp "github.com/ferrylabs/ferry/consumer/app"
	gatewayapp "github.com/ferrylabs/ferry/gateway/app"
	"github.com/ferrylabs/ferry/internal/cli"
	"github.com/ferrylabs/ferry/proto/prompb"
	pusherapp "github.com/ferrylabs/ferry/pusher/app"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// service is one command whose metrics docs/metrics.md documents. Its
// flags are docs/configuration.md's, generated and held by the tests in
// docs/.
type service struct {
	name string
	// config returns a fresh configuration to register flags on.
	config func() cli.Config
	// registries starts the service's components, as many times as it has
	// configurations registering different metrics (the pusher's
	// backends), on loopback ports and temporary directories, and returns
	// their registries; the components are stopped when the test ends.
	registries func(t *testing.T) []*prometheus.Registry
}

var services = []service{
	{
		name:   "ferry-consumer",
		config: func() cli.Config { return &consumerapp.Config{} },
		registries: func(t *testing.T) []*prometheus.Registry {
			var cfg consumerapp.Config
			parse(t, "ferry-consumer", &cfg, "-instance-id", "consumer-0", "-http.listen-address", "127.0.0.1:0",
				"-dlq.topic", "dead-letters")
			p, err := consumerapp.Start(cfg, discard())
			if err != nil {
				t.Fatalf("start ferry-consumer: %v", err)
			}
			t.Cleanup(func() { _ = p.Run(cancelled()) })
			return []*prometheus.Registry{p.Registry}
		},
	},
	{
		name:   "ferry-pusher",
		config: func() cli.Config { return &pusherapp.Config{} },
		registries: func(t *testing.T) []*prometheus.Registry {
			var regs []*prometheus.Registry
			for _, backend := range [][]string{
				{"-pusher.backend", pusherapp.BackendTSDB, "-storage.path", filepath.Join(t.TempDir(), "tsdb")},
				{"-pusher.backend", pusherapp.BackendRemoteWrite, "-remote-write.url", "http://127.0.0.1:1/api/v1/push"},
			} {
				var cfg pusherapp.Config
				parse(t, "ferry-pusher", &cfg, append(backend, "-grpc.listen-address", "127.0.0.1:0", "-http.listen-address", "127.0.0.1:0")...)
				p, err := pusherapp.Start(cfg, discard())
				if err != nil {
					t.Fatalf("start ferry-pusher %v: %v", backend, err)
				}
				t.Cleanup(func() { _ = p.Run(cancelled()) })
				// The TSDB's metrics are summed over the open tenants at
				// scrape time: open one, so they are gathered.
				if cfg.Backend == pusherapp.BackendTSDB {
					openTenant(t, p.Backend)
				}
				regs = append(regs, p.Registry)
			}
			return regs
		},
	},
	{
		name:   "ferry-gateway",
		config: func() cli.Config { return &gatewayapp.Config{} },
		registries: func(t *testing.T) []*prometheus.Registry {
			var cfg gatewayapp.Config
			parse(t, "ferry-gateway", &cfg, "-http.listen-address", "127.0.0.1:0")
			p, err := gatewayapp.Start(cfg, discard())
			if err != nil {
				t.Fatalf("start ferry-gateway: %v", err)
			}
			t.Cleanup(func() { _ = p.Run(cancelled()) })
			return []*prometheus.Registry{p.Registry}
		},
	},
}

// openTenant pushes one sample to a tenant of be and syncs it.
func openTenant(t *testing.T, be backend.Backend) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
		Labels:  []prompb.Label{{Name: "__name__", Value: "up"}},
		Samples: []prompb.Sample{{Value: 1, Timestamp: time.Now().UnixMilli()}},
	}}}
	if _, err := be.Push(ctx, "docs-test", req); err != nil {
		t.Fatalf("push: %v", err)
	}
	if _, err := be.Sync(ctx); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

func parse(t *testing.T, name string, cfg cli.Config, args ...string) {
	t.Helper()
	var stderr bytes.Buffer
	if err := cli.Parse(name, cfg, args, &stderr); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, stderr.String())
	}
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// cancelled is a done context: Run then stops what Start began at once.
func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the lines of doc under heading, up to the next heading
// of the same or a higher level (deeper headings belong to the section).
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	level := strings.IndexByte(heading, ' ')
	var out []string
	in := false
	for _, line := range strings.Split(doc, "\n") {
		if in {
			if n := strings.IndexByte(line, ' '); n > 0 && n <= level && strings.Trim(line[:n], "#") == "" {
				break
			}
			out = append(out, line)
		} else if line == heading {
			in = true
		}
	}
	if !in {
		t.Fatalf("no %q heading", heading)
	}
	return strings.Join(out, "\n")
}

// metricName finds metric names in docs/metrics.md: a backquoted ferry_
// name, not a prefix ending in *.
var metricName = regexp.MustCompile("`(ferry_[a-z0-9_]*[a-z0-9])`")

// registeredMetrics returns the names of every metric the registries
// describe (promauto metrics and custom collectors built with
// prometheus.NewDesc alike, whether or not they have a series yet) or
// gather (unchecked collectors, which describe nothing).
func registeredMetrics(t *testing.T, regs []*prometheus.Registry) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, reg := range regs {
		ch := make(chan *prometheus.Desc)
		go func() { reg.Describe(ch); close(ch) }()
		for d := range ch {
			if m := fq.FindStringSubmatch(d.String()); m != nil && strings.HasPrefix(m[1], "ferry_") {
				names[m[1]] = true
			}
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatalf("gather: %v", err)
		}
		for _, mf := range mfs {
			if strings.HasPrefix(mf.GetName(), "ferry_") {
				names[mf.GetName()] = true
			}
		}
	}
	return names
}

// TestMetricsDoc holds docs/metrics.md to what each service registers:
// every ferry_ metric has a row in the service's section (or is named in
// one, as the Kafka client's series are), and every metric the section
// names is registered.
func TestMetricsDoc(t *testing.T) {
	doc := readDoc(t, "docs/metrics.md")
	for _, s := range services {
		t.Run(s.name, func(t *testing.T) {
			text := section(t, doc, "## "+s.name)
			documented := map[string]bool{}
			for _, m := range metricName.FindAllStringSubmatch(text, -1) {
				documented[m[1]] = true
			}
			registered := registeredMetrics(t, s.registries(t))
			if len(registered) == 0 {
				t.Fatal("no ferry_ metric registered: the test starts nothing")
			}
			for _, name := range sortedKeys(registered) {
				if !documented[name] {
					t.Errorf("%s registers %s; docs/metrics.md's %q section does not document it", s.name, name, s.name)
				}
			}
			for _, name := range sortedKeys(documented) {
				if !registered[name] {
					t.Errorf("docs/metrics.md's %q section documents %s, which %s does not register", s.name, name, s.name)
				}
			}
		})
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestUnknownFlagIsAClearError: every service refuses a flag it does not
// have, naming it, instead of starting with a setting ignored.
func TestUnknownFlagIsAClearError(t *testing.T) {
	for _, s := range services {
		var stderr bytes.Buffer
		err := cli.Parse(s.name, s.config(), []string{"-no-such.flag=1"}, &stderr)
		if err == nil || !strings.Contains(err.Error(), "no-such.flag") {
			t.Errorf("%s -no-such.flag=1: error %v, want one naming the flag", s.name, err)
		}
	}
}
