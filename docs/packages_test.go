// Package docs holds tests that keep the documentation true to the code.
package docs

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// update rewrites the import table in design.md from the code:
// go test ./docs -run TestDesignImportTable -update.
var update = flag.Bool("update", false, "rewrite design.md's import table from go list")

const (
	module     = "github.com/ferrylabs/ferry/"
	tableBegin = "<!-- imports:begin (generated: go test ./docs -run TestDesignImportTable -update) -->"
	tableEnd   = "<!-- imports:end -->"
)

// TestDesignImportTable checks that design.md's table of which package
// imports which of Ferry's own packages is what `go list` reports, so the
// package diagram a reader trusts cannot drift from the code.
func TestDesignImportTable(t *testing.T) {
	t.Parallel()
	want := importTable(t)
	doc, err := os.ReadFile("design.md")
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := bytes.Cut(doc, []byte(tableBegin+"\n"))
	if !ok {
		t.Fatalf("design.md has no line %q", tableBegin)
	}
	got, after, ok := bytes.Cut(rest, []byte(tableEnd))
	if !ok {
		t.Fatalf("design.md has no line %q after the table's start", tableEnd)
	}
	if *update {
		out := slices.Concat(before, []byte(tableBegin+"\n"), []byte(want), []byte(tableEnd), after)
		if err := os.WriteFile("design.md", out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if string(got) != want {
		t.Errorf("design.md's import table is stale; run: go test ./docs -run TestDesignImportTable -update\n%s",
			lineDiff(string(got), want))
	}
}

// importTable renders, for every non-test package of the module, the
// module packages it imports directly, as a Markdown table.
func importTable(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{if .GoFiles}}{{.ImportPath}}{{range .Imports}} {{.}}{{end}}{{end}}`, "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var b strings.Builder
	b.WriteString("| package | imports of Ferry's own packages |\n|---|---|\n")
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		var own []string
		for _, imp := range fields[1:] {
			if rel, ok := strings.CutPrefix(imp, module); ok {
				own = append(own, "`"+rel+"`")
			}
		}
		name := strings.TrimPrefix(fields[0], module)
		if len(own) == 0 {
			own = []string{"—"}
		}
		fmt.Fprintf(&b, "| `%s` | %s |\n", name, strings.Join(own, ", "))
	}
	return b.String()
}

// lineDiff lists the lines only in got (-) and only in want (+).
func lineDiff(got, want string) string {
	g := strings.Split(got, "\n")
	w := strings.Split(want, "\n")
	var b strings.Builder
	for _, l := range g {
		if !slices.Contains(w, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range w {
		if !slices.Contains(g, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
