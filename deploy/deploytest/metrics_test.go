package deploytest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/ferrylabs/ferry/internal/opsserver"
)

// comingInIssue15 are metrics the dashboard and the rules use before the
// consumers export them. PENDING, for the lead to empty at merge: the test
// fails once docs/metrics.md lists one of them.
var comingInIssue15 = []string{}

// prometheusOwn are series Prometheus itself makes for every target.
var prometheusOwn = []string{"up"}

var documentedMetric = regexp.MustCompile("(?m)^\\| `([a-z_:]+)` \\|")

// knownMetrics returns every metric a Ferry process exports: the ones
// docs/metrics.md lists (services/docs_test.go holds that list to
// the code) and the Go and process collectors every ops server registers.
func knownMetrics(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range documentedMetric.FindAllStringSubmatch(string(doc), -1) {
		known[m[1]] = true
	}
	families, err := opsserver.NewRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		known[f.GetName()] = true
	}
	for _, m := range prometheusOwn {
		known[m] = true
	}
	for _, m := range comingInIssue15 {
		if known[m] {
			t.Errorf("%s is exported now: remove it from comingInIssue15", m)
		}
		known[m] = true
	}
	return known
}

// grafanaVariables are the dashboard's template variables with a value
// that keeps the expression valid PromQL.
var grafanaVariables = strings.NewReplacer(
	"$__rate_interval", "5m",
	"$__interval", "1m",
	"$consumer_job", "ferry-consumer",
	"$pusher_job", "ferry-pusher",
	"$gateway_job", "ferry-gateway",
)

// metricNames parses expr and returns the metric names it selects, with a
// histogram's _bucket, _sum and _count suffixes kept: the caller strips.
func metricNames(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		names = append(names, name)
		return nil
	})
	return names, nil
}

// checkMetric fails when name is neither exported nor recorded.
func checkMetric(t *testing.T, where, name string, known map[string]bool) {
	t.Helper()
	if known[name] {
		return
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && known[base] {
			return
		}
	}
	t.Errorf("%s uses %s, which no Ferry process exports (docs/metrics.md) and no rule records", where, name)
}

type panel struct {
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func TestDashboardQueriesParseAndUseExportedMetrics(t *testing.T) {
	t.Parallel()
	known := knownMetrics(t)
	for name := range recordedMetrics(t) {
		known[name] = true
	}
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "grafana", "ferry.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string  `json:"uid"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("ferry.json: %v", err)
	}
	var exprs int
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, tg := range p.Targets {
				exprs++
				names, err := metricNames(grafanaVariables.Replace(tg.Expr))
				if err != nil {
					t.Errorf("panel %q: %q: %v", p.Title, tg.Expr, err)
					continue
				}
				for _, n := range names {
					checkMetric(t, "panel "+p.Title, n, known)
				}
			}
		}
	}
	walk(d.Panels)
	if exprs == 0 {
		t.Fatal("the dashboard has no queries")
	}
}

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Record string `json:"record"`
			Alert  string `json:"alert"`
			Expr   string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "prometheus", "ferry.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("ferry.rules.yml: %v", err)
	}
	return f
}

// recordedMetrics are the names the recording rules create.
func recordedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				out[r.Record] = true
			}
		}
	}
	return out
}

func TestRulesUseExportedMetrics(t *testing.T) {
	t.Parallel()
	known := knownMetrics(t)
	for name := range recordedMetrics(t) {
		known[name] = true
	}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			names, err := metricNames(r.Expr)
			if err != nil {
				t.Errorf("rule %s%s: %v", r.Record, r.Alert, err)
				continue
			}
			for _, n := range names {
				checkMetric(t, "rule "+r.Record+r.Alert, n, known)
			}
		}
	}
}
