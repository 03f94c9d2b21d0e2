// Package logging builds the slog logger every Ferry process uses, from the
// -log.level and -log.format flags.
package logging

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// Config selects the level and format of the log.
type Config struct {
	Level  string
	Format string
}

// RegisterFlags registers -log.level and -log.format on f.
func (c *Config) RegisterFlags(f *flag.FlagSet) {
	f.StringVar(&c.Level, "log.level", "info", "Log level: debug, info, warn or error.")
	f.StringVar(&c.Format, "log.format", "logfmt", "Log format: logfmt or json.")
}

// Validate reports a bad level or format, naming the flag.
func (c *Config) Validate() error {
	if _, err := c.level(); err != nil {
		return err
	}
	if c.Format != "logfmt" && c.Format != "json" {
		return fmt.Errorf("-log.format must be logfmt or json, got %q", c.Format)
	}
	return nil
}

func (c *Config) level() (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(c.Level))); err != nil {
		return 0, fmt.Errorf("-log.level must be debug, info, warn or error, got %q", c.Level)
	}
	return l, nil
}

// New returns a logger writing to w. Call Validate first.
func (c *Config) New(w io.Writer) *slog.Logger {
	l, _ := c.level()
	opts := &slog.HandlerOptions{Level: l}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
