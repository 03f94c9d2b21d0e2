// Package cli is the one lifecycle every Ferry command shares: parse flags,
// validate, run until SIGINT or SIGTERM, exit with a status that says how
// it went (0 done, 1 failed while running, 2 bad flags). Every command
// also answers -version, as operators' tools expect of a Prometheus-style
// binary.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/common/version"
)

// ErrVersion is returned by Parse when -version was given: the command
// should print its version and exit with status 0.
var ErrVersion = errors.New("version printed")

// Config is a command's configuration.
type Config interface {
	RegisterFlags(f *flag.FlagSet)
	Validate() error
}

// Parse registers cfg's flags and -version, parses args and validates the
// result. The flag package prints the usage to stderr on a bad flag or -h;
// with -version, Parse returns ErrVersion without validating (Main then
// prints the version). Every other error returned means the command line
// is wrong.
func Parse(name string, cfg Config, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.RegisterFlags(fs)
	printVersion := fs.Bool("version", false, "Print the version, revision, branch and Go version, then exit.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *printVersion {
		return ErrVersion
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	return nil
}

// Main parses os.Args into cfg and calls run with a context that ends on
// SIGINT or SIGTERM. It does not return.
func Main(name string, cfg Config, run func(ctx context.Context) error) {
	if err := Parse(name, cfg, os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, ErrVersion) {
			// To standard output, as Prometheus' own binaries print it.
			fmt.Println(version.Print(name))
			os.Exit(0)
		}
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}
