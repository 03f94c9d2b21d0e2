package main

import (
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/gateway/app"
)

// TestReadmeDocumentsEveryFlag keeps the gateway's flag table in README.md
// true: every flag has a row in the table under "### ferry-gateway flags".
func TestReadmeDocumentsEveryFlag(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "### ferry-gateway flags")
	if !ok {
		t.Fatal(`README.md has no "### ferry-gateway flags" section`)
	}
	table, _, _ := strings.Cut(section, "\n\n#")
	var cfg app.Config
	fs := flag.NewFlagSet("ferry-gateway", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(table, "| `-"+f.Name+"` |") {
			t.Errorf("README.md's gateway flag table does not document -%s", f.Name)
		}
	})
}

// TestMetricsAreDocumented fails when a ferry_ metric named in the gateway's
// code is missing from docs/metrics.md.
func TestMetricsAreDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`Name: +"(ferry_[a-z_]+[a-z])"`)
	err = filepath.WalkDir("../../gateway", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range name.FindAllStringSubmatch(string(src), -1) {
			if !strings.Contains(string(doc), "`"+m[1]+"`") {
				t.Errorf("%s: metric %s is not in docs/metrics.md", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
