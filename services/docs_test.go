package services_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
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

// service is one command whose flags docs/configuration.md and whose
// metrics docs/metrics.md document.
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

// flagRow is one row of a flag table.
type flagRow struct{ name, typ, def, help string }

// flagRows parses the table rows of a doc section.
func flagRows(t *testing.T, text string) []flagRow {
	t.Helper()
	var rows []flagRow
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "| `-") {
			continue
		}
		cells := splitCells(line)
		if len(cells) != 4 {
			t.Errorf("row %q has %d cells, want 4 (flag, type, default, meaning)", line, len(cells))
			continue
		}
		rows = append(rows, flagRow{
			name: strings.TrimSuffix(strings.TrimPrefix(cells[0], "`-"), "`"),
			typ:  cells[1], def: cells[2], help: strings.ReplaceAll(cells[3], `\|`, "|"),
		})
	}
	return rows
}

// splitCells splits a Markdown table row on its unescaped pipes.
func splitCells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	line = strings.TrimSuffix(line, "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		if line[i] == '\\' && i+1 < len(line) && line[i+1] == '|' {
			cur.WriteString(`\|`)
			i++
			continue
		}
		if line[i] == '|' {
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteByte(line[i])
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

// Runtime defaults: a flag whose default is computed where the process
// runs (the host name, the CPUs) shows a placeholder in the default
// column, and the test checks the flag's default is what the placeholder
// names on this machine.
var runtimeDefaults = map[string]func() string{
	"`hostname`":   func() string { h, _ := os.Hostname(); return h },
	"`GOMAXPROCS`": func() string { return strconv.Itoa(runtime.GOMAXPROCS(0)) },
}

// flagType names a flag's type as the tables' type column does: bool,
// duration, int, float, or string for strings and custom values.
func flagType(f *flag.Flag) string {
	if g, ok := f.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case bool:
			return "bool"
		case time.Duration:
			return "duration"
		case int, int64, uint, uint64:
			return "int"
		case float64:
			return "float"
		}
	}
	// Strings, and custom values, which are parsed from one.
	return "string"
}

// defaultCell is the tables' default cell for f: empty for a zero default,
// a quoted string for strings, else the default as printed by the flag.
func defaultCell(f *flag.Flag) string {
	switch f.DefValue {
	case "", "0", "false", "0s":
		return ""
	}
	if flagType(f) == "string" {
		return "`" + strconv.Quote(f.DefValue) + "`"
	}
	return "`" + f.DefValue + "`"
}

// TestConfigurationFlagTables holds each service's flag table in
// docs/configuration.md to its real flag set, row for row: every flag has
// exactly one row, there is no row without a flag, and the type, default
// and meaning cells are the flag's. The file is generated (docs/
// configuration_test.go); this reads it back as a user would, so a table
// the generator breaks (a cell split by a pipe, a row lost) fails here.
func TestConfigurationFlagTables(t *testing.T) {
	doc := readDoc(t, "docs/configuration.md")
	for _, s := range services {
		t.Run(s.name, func(t *testing.T) {
			rows := flagRows(t, section(t, doc, "## "+s.name+" flags"))
			fs := flag.NewFlagSet(s.name, flag.ContinueOnError)
			s.config().RegisterFlags(fs)
			for _, p := range flagProblems(fs, rows) {
				t.Error(p)
			}
		})
	}
}

// flagProblems lists every difference between fs and rows.
func flagProblems(fs *flag.FlagSet, rows []flagRow) []string {
	var out []string
	seen := map[string]int{}
	for _, r := range rows {
		seen[r.name]++
		f := fs.Lookup(r.name)
		if f == nil {
			out = append(out, fmt.Sprintf("configuration.md documents -%s, which is not a flag: run make docs", r.name))
			continue
		}
		if seen[r.name] > 1 {
			out = append(out, fmt.Sprintf("configuration.md documents -%s %d times", r.name, seen[r.name]))
			continue
		}
		if typ := flagType(f); r.typ != typ {
			out = append(out, fmt.Sprintf("-%s: configuration.md type %q, want %q", r.name, r.typ, typ))
		}
		if runtimeValue, ok := runtimeDefaults[r.def]; ok {
			if f.DefValue != runtimeValue() {
				out = append(out, fmt.Sprintf("-%s: configuration.md default %s is %q here, but the flag's default is %q", r.name, r.def, runtimeValue(), f.DefValue))
			}
		} else if want := defaultCell(f); r.def != want {
			out = append(out, fmt.Sprintf("-%s: configuration.md default %q, want %q: run make docs", r.name, r.def, want))
		}
		if r.help != f.Usage {
			out = append(out, fmt.Sprintf("-%s: configuration.md meaning differs from the flag's help (run make docs):\ndoc:  %s\nflag: %s", r.name, r.help, f.Usage))
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if seen[f.Name] == 0 {
			out = append(out, fmt.Sprintf("configuration.md does not document -%s: run make docs", f.Name))
		}
	})
	return out
}

// TestFlagCheckCatchesMutations runs the flag check on mutated tables, so
// that the check itself cannot silently pass everything.
func TestFlagCheckCatchesMutations(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Duration("a.timeout", time.Second, "How long.")
	fs.String("b.name", "x", "A name.")
	fs.Bool("c.on", false, "Whether.")
	good := []flagRow{
		{"a.timeout", "duration", "`1s`", "How long."},
		{"b.name", "string", "`\"x\"`", "A name."},
		{"c.on", "bool", "", "Whether."},
	}
	if p := flagProblems(fs, good); len(p) != 0 {
		t.Fatalf("the true table fails: %v", p)
	}
	for name, rows := range map[string][]flagRow{
		"row dropped":   good[:2],
		"row doubled":   append(slices.Clone(good), good[0]),
		"extra row":     append(slices.Clone(good), flagRow{"d.gone", "int", "", "Gone."}),
		"wrong default": {{"a.timeout", "duration", "`2s`", "How long."}, good[1], good[2]},
		"wrong help":    {{"a.timeout", "duration", "`1s`", "How short."}, good[1], good[2]},
		"wrong type":    {good[0], {"b.name", "int", "`\"x\"`", "A name."}, good[2]},
	} {
		if len(flagProblems(fs, rows)) == 0 {
			t.Errorf("%s: the check passes", name)
		}
	}
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
