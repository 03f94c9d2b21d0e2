package queryapi

import (
	"context"
	"errors"
	"flag"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql"
)

func TestConfigFlags(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	want := Config{Timeout: 2 * time.Minute, MaxSamples: 50_000_000, LookbackDelta: 5 * time.Minute, MaxConcurrency: 20,
		MaxExpressionBytes: 256 << 10, MaxExpressionTokens: 10_000, MaxExpressionDepth: 128}
	if c != want {
		t.Errorf("defaults %+v, want %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
	var help strings.Builder
	fs.SetOutput(&help)
	fs.PrintDefaults()
	for _, s := range []string{"(default 2m0s)", "(default 50000000)", "(default 5m0s)", "(default 20)"} {
		if !strings.Contains(help.String(), s) {
			t.Errorf("help lacks %q:\n%s", s, help.String())
		}
	}

	for flagName, mutate := range map[string]func(*Config){
		"-query.timeout":         func(c *Config) { c.Timeout = 0 },
		"-query.max-samples":     func(c *Config) { c.MaxSamples = -1 },
		"-query.lookback-delta":  func(c *Config) { c.LookbackDelta = 0 },
		"-query.max-concurrency": func(c *Config) { c.MaxConcurrency = 0 },
	} {
		bad := want
		mutate(&bad)
		err := bad.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), flagName) {
			t.Errorf("invalid %s: error %v", flagName, err)
		}
		if _, err := New(bad, &testSource{}, nil, nil); err == nil {
			t.Errorf("New accepted invalid %s", flagName)
		}
	}
}

func TestParseTime(t *testing.T) {
	for in, want := range map[string]time.Time{
		"1700000000":           time.Unix(1700000000, 0),
		"1700000000.123":       time.UnixMilli(1700000000123),
		"1700000000.1234":      time.UnixMilli(1700000000123),
		"2023-11-14T22:13:20Z": time.Unix(1700000000, 0),
		minTimeFormatted:       minTime,
		maxTimeFormatted:       maxTime,
	} {
		got, err := parseTime(in)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "now", "2023-11-14"} {
		if _, err := parseTime(in); err == nil {
			t.Errorf("parseTime(%q) succeeded", in)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"15":    15 * time.Second,
		"0.5":   500 * time.Millisecond,
		"15s":   15 * time.Second,
		"1h30m": 90 * time.Minute,
		"1d":    24 * time.Hour,
	} {
		got, err := parseDuration(in)
		if err != nil || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "fast", "NaN", "1e300"} {
		if _, err := parseDuration(in); err == nil {
			t.Errorf("parseDuration(%q) succeeded", in)
		}
	}
}

func TestAppendFloat(t *testing.T) {
	for f, want := range map[float64]string{
		0:            `"0"`,
		42:           `"42"`,
		-0.25:        `"-0.25"`,
		1e-7:         `"1e-07"`,
		1e21:         `"1e+21"`,
		123456789.5:  `"123456789.5"`,
		math.Inf(1):  `"+Inf"`,
		math.Inf(-1): `"-Inf"`,
	} {
		if got := string(appendFloat(nil, f)); got != want {
			t.Errorf("appendFloat(%v) = %s, want %s", f, got, want)
		}
	}
	if got := string(appendFloat(nil, math.NaN())); got != `"NaN"` {
		t.Errorf("appendFloat(NaN) = %s", got)
	}
}

func TestAppendTimestamp(t *testing.T) {
	for ms, want := range map[int64]string{
		0: "0", 1000: "1", 1500: "1.500", 1050: "1.050", 1005: "1.005", -1500: "-1.500", 1700000000123: "1700000000.123",
	} {
		if got := string(appendTimestamp(nil, ms)); got != want {
			t.Errorf("appendTimestamp(%d) = %s, want %s", ms, got, want)
		}
	}
}

func TestAppendString(t *testing.T) {
	for in, want := range map[string]string{
		"plain":     `"plain"`,
		`q"uote\`:   `"q\"uote\\"`,
		"a<b>&c":    `"a\u003cb\u003e\u0026c"`,
		"tab\tnl\n": `"tab\tnl\n"`,
		"ünï":       `"ünï"`,
		"\xff":      `"\ufffd"`,
	} {
		if got := string(appendString(nil, in)); got != want {
			t.Errorf("appendString(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestLimiter(t *testing.T) {
	l := newLimiter(1)
	if l.GetMaxConcurrent() != 1 {
		t.Fatalf("GetMaxConcurrent = %d", l.GetMaxConcurrent())
	}
	if _, err := l.Insert(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	var timeout promql.ErrQueryTimeout
	if _, err := l.Insert(ctx, "b"); !errors.As(err, &timeout) {
		t.Errorf("Insert on a full limiter: %v, want ErrQueryTimeout", err)
	}
	canceled, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	var errCanceled promql.ErrQueryCanceled
	if _, err := l.Insert(canceled, "c"); !errors.As(err, &errCanceled) {
		t.Errorf("Insert with a canceled context: %v, want ErrQueryCanceled", err)
	}
	l.Delete(0)
	if _, err := l.Insert(context.Background(), "d"); err != nil {
		t.Errorf("Insert after Delete: %v", err)
	}
}

func TestErrorClassification(t *testing.T) {
	for _, tc := range []struct {
		err  error
		typ  errorType
		code int
	}{
		{promql.ErrQueryTimeout("x"), errorTimeout, 503},
		{promql.ErrQueryCanceled("x"), errorCanceled, 499},
		{promql.ErrStorage{Err: errors.New("disk")}, errorInternal, 500},
		{promql.ErrTooManySamples("x"), errorExec, 422},
		{context.Canceled, errorCanceled, 499},
		{errors.New("boom"), errorExec, 422},
	} {
		e := execError(tc.err)
		if e.typ != tc.typ || e.typ.httpStatus() != tc.code {
			t.Errorf("execError(%v) = %s/%d, want %s/%d", tc.err, e.typ, e.typ.httpStatus(), tc.typ, tc.code)
		}
	}
	if got := constructionError(errors.New("parse")).typ; got != errorBadData {
		t.Errorf("constructionError(parse) = %s", got)
	}
	if got := constructionError(promql.ErrQueryTimeout("queue")).typ; got != errorTimeout {
		t.Errorf("constructionError(timeout) = %s", got)
	}
}
