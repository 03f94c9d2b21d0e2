package queryapi

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// maxPointsPerSeries is Prometheus' cap on the steps of a range query:
// enough for a week at 60s resolution, and it stops a tiny step from
// making one request evaluate millions of steps.
const maxPointsPerSeries = 11000

var (
	// minTime and maxTime are the defaults of optional start and end
	// parameters. They are Prometheus' values, not the int64 extremes,
	// because clients (promtool, client_golang) send these exact instants
	// back formatted as RFC 3339 and expect them to be accepted.
	minTime = time.Unix(math.MinInt64/1000+62135596801, 0).UTC()
	maxTime = time.Unix(math.MaxInt64/1000-62135596801, 999999999).UTC()

	minTimeFormatted = minTime.Format(time.RFC3339Nano)
	maxTimeFormatted = maxTime.Format(time.RFC3339Nano)
)

// parseTime accepts unix seconds with an optional fraction (Grafana's form)
// or RFC 3339 (promtool's form). The fraction is rounded to milliseconds,
// the resolution of the TSDB, as Prometheus does.
func parseTime(s string) (time.Time, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		sec, frac := math.Modf(f)
		frac = math.Round(frac*1000) / 1000
		return time.Unix(int64(sec), int64(frac*float64(time.Second))).UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	// time.Parse only handles four-digit years, which the boundary
	// instants do not have.
	switch s {
	case minTimeFormatted:
		return minTime, nil
	case maxTimeFormatted:
		return maxTime, nil
	}
	return time.Time{}, fmt.Errorf("cannot parse %q to a valid timestamp", s)
}

// timeParam parses the optional time parameter name of r, returning def
// when it is absent.
func timeParam(r *http.Request, name string, def time.Time) (time.Time, *apiError) {
	v := r.FormValue(name)
	if v == "" {
		return def, nil
	}
	t, err := parseTime(v)
	if err != nil {
		return time.Time{}, invalidParam(name, fmt.Errorf("invalid time value for '%s': %w", name, err))
	}
	return t, nil
}

// parseDuration accepts float seconds ("15", "0.5") or a Prometheus
// duration ("15s", "1h30m"), the two forms clients send for step and
// timeout.
func parseDuration(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		ns := f * float64(time.Second)
		// NaN fails every comparison, so test it explicitly; 2^63 itself
		// does not fit an int64.
		if math.IsNaN(ns) || ns >= float64(math.MaxInt64) || ns < float64(math.MinInt64) {
			return 0, fmt.Errorf("cannot parse %q to a valid duration. It overflows int64", s)
		}
		return time.Duration(ns), nil
	}
	if d, err := model.ParseDuration(s); err == nil {
		return time.Duration(d), nil
	}
	return 0, fmt.Errorf("cannot parse %q to a valid duration", s)
}

// limitParam parses the optional "limit" parameter; 0 means no limit.
func limitParam(r *http.Request) (int, *apiError) {
	v := r.FormValue("limit")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, invalidParam("limit", err)
	}
	if n < 0 {
		return 0, invalidParam("limit", errors.New("limit must be non-negative"))
	}
	return n, nil
}

// hintLimit asks storage for one result more than the limit, so that the
// handler can tell the client that it truncated.
func hintLimit(limit int) int {
	if limit > 0 && limit < math.MaxInt {
		return limit + 1
	}
	return limit
}

// parseMatchers parses match[] selectors. A selector whose every matcher
// also matches the empty string (such as {job=~".*"}) would select every
// series of the tenant, so it is refused, as in Prometheus.
func parseMatchers(p parser.Parser, selectors []string) ([][]*labels.Matcher, error) {
	sets := make([][]*labels.Matcher, 0, len(selectors))
	for _, s := range selectors {
		ms, err := p.ParseMetricSelector(s)
		if err != nil {
			return nil, err
		}
		nonEmpty := false
		for _, m := range ms {
			if m != nil && !m.Matches("") {
				nonEmpty = true
				break
			}
		}
		if !nonEmpty {
			return nil, errors.New("match[] must contain at least one non-empty matcher")
		}
		sets = append(sets, ms)
	}
	return sets, nil
}
