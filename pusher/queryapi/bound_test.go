package queryapi

import (
	"bytes"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"google.golang.org/protobuf/encoding/protowire"
)

// hostileExpressions are expressions whose parse time grows faster than
// their size (issue 31, finding 4: 40,000 nested parentheses answered
// after 9.3 s a query whose timeout was 2 s), each over one bound.
func hostileExpressions() map[string]string {
	const n = 40_000
	return map[string]string{
		"nested parentheses":    strings.Repeat("(", n) + "up" + strings.Repeat(")", n),
		"nested functions":      strings.Repeat("abs(", n) + "up" + strings.Repeat(")", n),
		"nested braces":         strings.Repeat("{", n),
		"nested brackets":       "up" + strings.Repeat("[", n),
		"a chain of or":         strings.Repeat("up or ", n) + "up",
		"a chain of plus":       strings.Repeat("up+", n) + "up",
		"a chain of subquery":   "up" + strings.Repeat("[1m:]", n),
		"a chain of unary":      strings.Repeat("-", 4*n) + "1",
		"a selector's matchers": "up{" + strings.Repeat(`a="1",`, n) + "}",
		"a long string":         `up{a="` + strings.Repeat("x", 300<<10) + `"}`,
	}
}

// TestEveryQueryDoorRefusesAHostileExpressionFast sends each hostile
// expression through every door that parses PromQL, with the request's
// timeout at 2 s, and wants a 400 well within it.
func TestEveryQueryDoorRefusesAHostileExpressionFast(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testConfig())
	doors := []struct {
		path  string
		param string
		extra url.Values
	}{
		{"/api/v1/query", "query", url.Values{"time": {"1"}}},
		{"/api/v1/query_range", "query", url.Values{"start": {"0"}, "end": {"60"}, "step": {"15"}}},
		{"/api/v1/query_exemplars", "query", nil},
		{"/api/v1/series", "match[]", nil},
		{"/api/v1/labels", "match[]", nil},
		{"/api/v1/label/job/values", "match[]", nil},
	}
	for shape, expr := range hostileExpressions() {
		for _, d := range doors {
			params := url.Values{d.param: {expr}, "timeout": {"2s"}}
			for k, v := range d.extra {
				params[k] = v
			}
			start := time.Now()
			code, resp, _ := e.do(t, http.MethodPost, "alpha", d.path, params)
			took := time.Since(start)
			if code != http.StatusBadRequest || resp.ErrorType != string(errorBadData) {
				t.Errorf("%s through %s: %d %s %q, want 400 bad_data", shape, d.path, code, resp.ErrorType, resp.Error)
			}
			if took > 1500*time.Millisecond {
				t.Errorf("%s through %s: answered after %v, want well within the 2 s timeout", shape, d.path, took)
			}
		}
	}
}

// TestRemoteReadRefusesAHostileRegexpFast sends remote reads whose
// matcher's regular expression is over a bound.
func TestRemoteReadRefusesAHostileRegexpFast(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testConfig())
	for name, re := range map[string]string{
		"nested groups": strings.Repeat("(", 40_000) + "a" + strings.Repeat(")", 40_000),
		"a long regexp": strings.Repeat("a|", 200<<10) + "a",
	} {
		m := &labels.Matcher{Type: labels.MatchRegexp, Name: "job", Value: re} // not compiled here
		start := time.Now()
		resp, body := e.remoteRead(t, "alpha", encodeReadRequest([]testQuery{allTime(m)}))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "-query.max-expression-") {
			t.Errorf("%s: %d %.200q, want 400 naming the bound", name, resp.StatusCode, body)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s: answered after %v", name, took)
		}
	}
}

// TestALegitimateQueryWithinTheBoundsStillWorks: a realistic query, and
// one with a long regular expression (one token however long), are
// answered as before.
func TestALegitimateQueryWithinTheBoundsStillWorks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testConfig())
	hosts := make([]string, 2000)
	for i := range hosts {
		hosts[i] = "host-" + strings.Repeat("x", 20)
	}
	for _, q := range []string{
		`sum by (job) (rate(i1{job=~"a|b"}[5m])) / ignoring(job) group_left sum(rate(i2[5m]) or vector(1))`,
		`count(i1{instance=~"` + strings.Join(hosts, "|") + `"}) or vector(0)`,
		strings.Repeat("(", 100) + "i1" + strings.Repeat(")", 100),
	} {
		code, resp, _ := e.do(t, http.MethodPost, "alpha", "/api/v1/query", url.Values{"query": {q}, "time": {"1"}})
		if code != http.StatusOK {
			t.Errorf("query of %d bytes: %d %s", len(q), code, resp.Error)
		}
	}
	code, resp, _ := e.do(t, http.MethodPost, "alpha", "/api/v1/series", url.Values{"match[]": {`{__name__=~"i.+"}`}})
	if code != http.StatusOK {
		t.Errorf("series: %d %s", code, resp.Error)
	}
}

// TestTheCostliestExpressionsWithinTheBoundsParseQuickly parses the
// hostile shapes cut to just within the default bounds, directly, to
// show what the bounds leave: this is the most parse time one query can
// cost.
func TestTheCostliestExpressionsWithinTheBoundsParseQuickly(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	p := newParser(cfg)
	const n = 10_000 / 2 // two tokens a repetition: the token bound
	for shape, expr := range map[string]string{
		"a chain of or":       strings.Repeat("up or ", n-1) + "up",
		"a chain of plus":     strings.Repeat("up+", n-1) + "up",
		"a chain of power":    strings.Repeat("up^", n-1) + "up",
		"a chain of subquery": "up" + strings.Repeat("[1m:]", 10_000/4-1),
		"nested parentheses":  strings.Repeat("(", 127) + strings.Repeat("up or ", n-200) + "up" + strings.Repeat(")", 127),
	} {
		start := time.Now()
		_, err := p.ParseExpr(expr)
		took := time.Since(start)
		if err != nil && strings.Contains(err.Error(), "-query.max-expression-") {
			t.Errorf("%s: refused by a bound: %v", shape, err)
		}
		t.Logf("%s: %d bytes parsed in %v", shape, len(expr), took)
		if took > 5*time.Second { // about 0.2 s; the race detector makes it seven times slower
			t.Errorf("%s: parsed in %v", shape, took)
		}
	}
}

// TestAReadRequestOfManyEmptyElementsIsRefusedBeforeItIsDecoded: empty
// matchers cost two bytes each on the wire and a struct each once
// decoded. A request of them, and one of many empty queries, are refused
// while decoding has allocated little more than the decompressed body.
// Not parallel: it reads the process's allocation counter.
func TestAReadRequestOfManyEmptyElementsIsRefusedBeforeItIsDecoded(t *testing.T) {
	emptyMatchers := bytes.Repeat([]byte{0x1a, 0x00}, (maxReadRequestBytes-16)/2)
	for name, body := range map[string][]byte{
		"empty matchers": protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), emptyMatchers),
		"empty queries":  bytes.Repeat([]byte{0x0a, 0x00}, maxReadRequestBytes/2),
	} {
		compressed := snappy.Encode(nil, body)
		limits := testLimits()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := readRequestBody(bytes.NewReader(compressed), limits)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), "over a bound") {
			t.Errorf("%s: %v, want a bound's error", name, err)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 3*maxReadRequestBytes {
			t.Errorf("%s (%d bytes compressed, %d decoded): decoding allocated %d MiB, want at most %d MiB", name, len(compressed), len(body), got>>20, 3*maxReadRequestBytes>>20)
		}
	}
}

func testLimits() exprLimits {
	cfg := testConfig()
	return cfg.exprLimits()
}
