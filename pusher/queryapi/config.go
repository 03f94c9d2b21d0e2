package queryapi

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"
)

// Config holds the query engine's limits.
type Config struct {
	// Timeout bounds one query's evaluation; a request's own timeout
	// parameter can only shorten it.
	Timeout time.Duration
	// MaxSamples caps the samples one query may hold in memory at once,
	// which bounds the memory a single expensive query can take.
	MaxSamples int
	// LookbackDelta is how far back an instant selector looks for the
	// latest sample; Prometheus' default is 5m and dashboards assume it.
	LookbackDelta time.Duration
	// MaxConcurrency is how many queries evaluate at once; further queries
	// wait for a slot (until their timeout) instead of overloading the
	// process that also ingests.
	MaxConcurrency int
	// DefaultTenant, when set, is the tenant of a request without the
	// X-Scope-OrgID header. It serves single-tenant setups whose clients
	// cannot set headers (Prometheus' remote_read before 2.x added
	// headers, promtool without --http.config.file), like Mimir's
	// "anonymous" tenant when multitenancy is off.
	DefaultTenant string
	// MaxExpressionBytes, MaxExpressionTokens and MaxExpressionDepth bound
	// every PromQL expression and selector before it is parsed (and a
	// remote read's regular expressions): Prometheus' parser cannot be
	// interrupted and its cost grows faster than its input (see bound.go).
	MaxExpressionBytes  int
	MaxExpressionTokens int
	MaxExpressionDepth  int
}

// ErrInvalidConfig is wrapped by every error Validate returns, so callers
// can tell a configuration mistake from a runtime failure.
var ErrInvalidConfig = errors.New("invalid configuration")

// RegisterFlags registers the query flags on f. The flag package prints
// each default in the help output, e.g. "(default 2m0s)".
func (c *Config) RegisterFlags(f *flag.FlagSet) {
	f.DurationVar(&c.Timeout, "query.timeout", 2*time.Minute, "Longest time one query may evaluate; a request's timeout parameter can only shorten it.")
	f.IntVar(&c.MaxSamples, "query.max-samples", 50_000_000, "Most samples one query may load into memory at once; a query over the limit fails with an execution error. Also bounds each query of a remote read (/api/v1/read), which then fails with 400 \"exceeded sample limit\".")
	f.DurationVar(&c.LookbackDelta, "query.lookback-delta", 5*time.Minute, "How far back an instant vector selector looks for the latest sample of a series.")
	f.IntVar(&c.MaxConcurrency, "query.max-concurrency", 20, "Queries evaluated at once; further queries wait for a free slot until their timeout.")
	f.IntVar(&c.MaxExpressionBytes, "query.max-expression-bytes", 256<<10, "Longest PromQL expression or match[] selector accepted, in bytes, and longest regular expression of a remote read's matcher; a longer one is refused with 400 before it is parsed.")
	f.IntVar(&c.MaxExpressionTokens, "query.max-expression-tokens", 10_000, "Most tokens (names, numbers, strings, operators, brackets) a PromQL expression or match[] selector may have; more is refused with 400 before parsing, since parse time grows faster than the token count and ignores the query timeout.")
	f.IntVar(&c.MaxExpressionDepth, "query.max-expression-depth", 128, "Deepest nesting of brackets ( { [ a PromQL expression or match[] selector, or a remote read's regular expression, may have; deeper is refused with 400 before parsing.")
	f.StringVar(&c.DefaultTenant, "query.default-tenant", "", "Tenant of a query request that has no X-Scope-OrgID header; empty refuses such requests with 401. For single-tenant setups whose clients cannot set headers.")
}

// exprLimits returns the bounds on one expression.
func (c *Config) exprLimits() exprLimits {
	return exprLimits{maxBytes: c.MaxExpressionBytes, maxTokens: c.MaxExpressionTokens, maxDepth: c.MaxExpressionDepth}
}

// Validate reports the first invalid setting, naming its flag.
func (c *Config) Validate() error {
	if c.Timeout <= 0 {
		return fmt.Errorf("%w: -query.timeout must be positive, got %s", ErrInvalidConfig, c.Timeout)
	}
	if c.MaxSamples <= 0 {
		return fmt.Errorf("%w: -query.max-samples must be positive, got %d", ErrInvalidConfig, c.MaxSamples)
	}
	if c.LookbackDelta <= 0 {
		return fmt.Errorf("%w: -query.lookback-delta must be positive, got %s", ErrInvalidConfig, c.LookbackDelta)
	}
	if c.MaxConcurrency <= 0 {
		return fmt.Errorf("%w: -query.max-concurrency must be positive, got %d", ErrInvalidConfig, c.MaxConcurrency)
	}
	for _, b := range []struct {
		flag string
		v    int
	}{
		{"-query.max-expression-bytes", c.MaxExpressionBytes},
		{"-query.max-expression-tokens", c.MaxExpressionTokens},
		{"-query.max-expression-depth", c.MaxExpressionDepth},
	} {
		if b.v <= 0 {
			return fmt.Errorf("%w: %s must be positive, got %d", ErrInvalidConfig, b.flag, b.v)
		}
	}
	if t := c.DefaultTenant; t == "." || t == ".." || strings.ContainsAny(t, "/\\\x00") {
		return fmt.Errorf("%w: -query.default-tenant %q is not a valid tenant ID", ErrInvalidConfig, t)
	}
	return nil
}
