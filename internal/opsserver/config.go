package opsserver

import (
	"flag"
	"fmt"
	"time"

	"github.com/ferrylabs/ferry/internal/tlsreload"
)

// Config is what every Ferry HTTP server shares beyond its address: TLS
// and the timeouts that keep a slow or idle client from holding a
// connection (and its goroutine and buffers) for ever.
type Config struct {
	TLS               tlsreload.Server
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	// EnablePprof serves Go's profiles under /debug/pprof/.
	EnablePprof bool
}

// RegisterFlags registers the flags on f.
func (c *Config) RegisterFlags(f *flag.FlagSet) {
	c.TLS.RegisterFlagsWithPrefix("http", "HTTP server", f)
	f.DurationVar(&c.ReadHeaderTimeout, "http.read-header-timeout", 10*time.Second, "Longest time a client may take to send a request's headers.")
	f.DurationVar(&c.ReadTimeout, "http.read-timeout", 30*time.Second, "Longest time a client may take to send a whole request, body included.")
	// Answers are written once evaluated, so this bounds a query too; it
	// must exceed -query.timeout where the query API is served.
	f.DurationVar(&c.WriteTimeout, "http.write-timeout", 3*time.Minute, "Longest time from the end of a request's headers to the end of its answer, evaluation included: keep it above -query.timeout.")
	f.DurationVar(&c.IdleTimeout, "http.idle-timeout", 2*time.Minute, "How long a keep-alive connection may wait for its next request.")
	// Off by default: a profile exposes internals and costs CPU, and the
	// HTTP port is often reachable by more than the operators.
	f.BoolVar(&c.EnablePprof, "server.enable-pprof", false, "Serve Go's runtime profiles under /debug/pprof/ on the HTTP port.")
}

// Validate reports the first invalid setting, naming its flag.
func (c *Config) Validate() error {
	if err := c.TLS.Validate(); err != nil {
		return err
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{
		{"-http.read-header-timeout", c.ReadHeaderTimeout},
		{"-http.read-timeout", c.ReadTimeout},
		{"-http.write-timeout", c.WriteTimeout},
		{"-http.idle-timeout", c.IdleTimeout},
	} {
		if d.value <= 0 {
			return fmt.Errorf("%s must be positive, got %s", d.flag, d.value)
		}
	}
	return nil
}
