package docs

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// proseDocs are the pages whose prose names Ferry's flags and metrics:
// README.md and every page of docs/ but benchmarks.md, which names the
// harness's own flags (bench/config.go) and those of its experiments.
func proseDocs(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = slices.DeleteFunc(pages, func(p string) bool { return p == "benchmarks.md" })
	return append(pages, "../README.md")
}

// namedFlag finds a backquoted flag in Mimir's dotted style, alone or
// with a value: `-storage.tenancy=shared`. Patterns such as
// `-kafka.tls-*` are not matched.
var namedFlag = regexp.MustCompile("`(-[a-z][a-z0-9-]*(?:\\.[a-z0-9-]+)+)(?:=[^`]*)?`")

// foreignFlags are flags of other programs that the docs name.
var foreignFlags = map[string]bool{
	"-dedup.minScrapeInterval": true, // VictoriaMetrics (remote-write.md)
}

// TestFlagsNamedInTheDocsExist: every flag the prose names is a flag of
// one of the commands, so a renamed or removed flag cannot live on in a
// sentence that configuration.md's generated tables do not reach.
func TestFlagsNamedInTheDocsExist(t *testing.T) {
	known := map[string]bool{}
	for _, c := range commands {
		flags(c.config).VisitAll(func(f *flag.Flag) { known["-"+f.Name] = true })
	}
	for _, page := range proseDocs(t) {
		for _, name := range backquoted(t, page, namedFlag) {
			if !known[name] && !foreignFlags[name] {
				t.Errorf("%s names %s, which no command has (configuration.md lists them)", page, name)
			}
		}
	}
}

// namedMetric finds a backquoted ferry_ metric, not a prefix ending in *
// or _.
var namedMetric = regexp.MustCompile("`(ferry_[a-z0-9_]*[a-z0-9])(?:\\{[^`]*\\})?`")

// TestMetricsNamedInTheDocsAreDocumented: every ferry_ metric the prose
// names is listed in metrics.md, which services/docs_test.go holds to
// what the commands register.
func TestMetricsNamedInTheDocsAreDocumented(t *testing.T) {
	reference, err := os.ReadFile("metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range proseDocs(t) {
		for _, name := range backquoted(t, page, namedMetric) {
			if !strings.Contains(string(reference), "`"+name+"`") {
				t.Errorf("%s names %s, which metrics.md does not list", page, name)
			}
		}
	}
}

// backquoted returns the first group of every match of re in page.
func backquoted(t *testing.T, page string, re *regexp.Regexp) []string {
	t.Helper()
	text, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range re.FindAllStringSubmatch(string(text), -1) {
		out = append(out, m[1])
	}
	return out
}

// readmePorts is README's sentence of the default ports.
var readmePorts = regexp.MustCompile(`Ports: pusher gRPC (\d+), pusher HTTP (\d+), consumer HTTP\s+(\d+), gateway HTTP (\d+)`)

// TestReadmePortsAreTheDefaults holds README's default ports to the
// listen-address flags' defaults.
func TestReadmePortsAreTheDefaults(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := readmePorts.FindStringSubmatch(string(readme))
	if m == nil {
		t.Fatalf("README.md has no sentence matching %q", readmePorts)
	}
	port := func(command, name string) string {
		for _, c := range commands {
			if c.name == command {
				addr := flags(c.config).Lookup(name).DefValue
				return addr[strings.LastIndexByte(addr, ':')+1:]
			}
		}
		t.Fatalf("no command %s", command)
		return ""
	}
	for i, want := range []string{
		port("ferry-pusher", "grpc.listen-address"),
		port("ferry-pusher", "http.listen-address"),
		port("ferry-consumer", "http.listen-address"),
		port("ferry-gateway", "http.listen-address"),
	} {
		if m[i+1] != want {
			t.Errorf("README.md: %q says port %s where the flag's default is %s", m[0], m[i+1], want)
		}
	}
}

// link finds a Markdown link's target.
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestRelativeLinksResolve: every link from README.md or a page of docs/
// to another file of the repository names a file that exists and, with a
// #fragment into a Markdown page, one of its headings, so moving a section
// cannot leave a dead link behind.
func TestRelativeLinksResolve(t *testing.T) {
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range append(pages, "../README.md") {
		for _, target := range backquoted(t, page, link) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, fragment, _ := strings.Cut(target, "#")
			if path == "" {
				path = filepath.Base(page)
			}
			path = filepath.Join(filepath.Dir(page), path)
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s, which does not exist", page, target)
				continue
			}
			if fragment != "" && strings.HasSuffix(path, ".md") && !slices.Contains(anchors(t, path), fragment) {
				t.Errorf("%s links to %s, which has no heading #%s", page, target, fragment)
			}
		}
	}
}

// anchors returns the fragments GitHub gives the headings of a page:
// lower case, punctuation dropped, spaces turned into hyphens.
func anchors(t *testing.T, page string) []string {
	t.Helper()
	text, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	inCode := false
	for line := range strings.Lines(string(text)) {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		heading, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if inCode || !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}
