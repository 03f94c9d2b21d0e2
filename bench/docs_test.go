package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheBenchmarksPageTakesANewRunInPlace: writeReport, given a new
// generated section, replaces docs/benchmarks.md's section between the
// markers and keeps every line people wrote around it, so `make bench`
// rewrites the latest results without appending a second section.
func TestTheBenchmarksPageTakesANewRunInPlace(t *testing.T) {
	page, err := readFile(filepath.Join("..", "docs", "benchmarks.md"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(page, beginMarker) != 1 || strings.Count(page, endMarker) != 1 ||
		strings.Index(page, beginMarker) > strings.Index(page, endMarker) {
		t.Fatalf("docs/benchmarks.md must hold one %q line and one %q line after it", beginMarker, endMarker)
	}
	before, rest, _ := strings.Cut(page, beginMarker)
	_, after, _ := strings.Cut(rest, endMarker)

	path := filepath.Join(t.TempDir(), "benchmarks.md")
	if err := os.WriteFile(path, []byte(page), 0o600); err != nil {
		t.Fatal(err)
	}
	run := beginMarker + "\n\n## Results of a new run\n\n" + endMarker + "\n"
	if err := writeReport(path, run); err != nil {
		t.Fatal(err)
	}
	got, err := readFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := before + strings.TrimRight(run, "\n") + after; got != want {
		t.Errorf("writeReport changed more than the generated section of docs/benchmarks.md:\n%s", got)
	}
}
