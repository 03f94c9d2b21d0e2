package main

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/ferrylabs/ferry/consumer/app"
)

// TestReadmeDocumentsEveryFlag keeps README.md's flag table true.
func TestReadmeDocumentsEveryFlag(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var cfg app.Config
	fs := flag.NewFlagSet("ferry-consumer", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(string(readme), "| `-"+f.Name+"` |") {
			t.Errorf("README.md does not document -%s", f.Name)
		}
	})
}
