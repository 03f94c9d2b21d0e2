package docs

import (
	"os"
	"strings"
	"testing"
)

// Page lengths for readers (issue 30): README.md is the front page, read
// whole; benchmarks.md's written part frames a generated section of about
// 400 lines (the run's tables), and the two stay under 600 together.
const (
	maxReadmeLines            = 300
	maxBenchmarksLines        = 599
	maxBenchmarksWrittenLines = 195
	benchBegin                = "<!-- bench:begin"
	benchEnd                  = "<!-- bench:end -->"
)

func TestTheReadmeStaysShort(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move detail to a page of docs/ and link it", n, maxReadmeLines)
	}
}

// TestTheBenchmarksPageStaysShort counts the lines of benchmarks.md
// outside the section `make bench` writes: the dated journal of attempts
// lives in git, and the page keeps one line or two per attempt.
func TestTheBenchmarksPageStaysShort(t *testing.T) {
	page, err := os.ReadFile("benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := strings.Cut(string(page), benchBegin)
	_, after, ok2 := strings.Cut(rest, benchEnd)
	if !ok || !ok2 {
		t.Fatalf("benchmarks.md has no generated section between %q and %q", benchBegin, benchEnd)
	}
	if n := strings.Count(before, "\n") + strings.Count(after, "\n"); n > maxBenchmarksWrittenLines {
		t.Errorf("benchmarks.md has %d lines outside its generated section, more than %d: condense, the journal is in git", n, maxBenchmarksWrittenLines)
	}
	if n := strings.Count(string(page), "\n"); n > maxBenchmarksLines {
		t.Errorf("benchmarks.md has %d lines, more than %d: condense the written part or the run's tables (bench/)", n, maxBenchmarksLines)
	}
}
