package queryapi

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestMetadataEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testConfig())
	counter := `{"ferry_test_metric":[{"type":"counter","help":"A test counter.","unit":"seconds"}]`
	for _, tc := range []struct {
		name   string
		tenant string
		params url.Values
		want   string
	}{
		{"every family is listed", "alpha", nil, counter + `,"other_metric":[{"type":"gauge","help":"Another.","unit":""}]}`},
		{"metric selects one family", "alpha", url.Values{"metric": {"ferry_test_metric"}}, counter + `}`},
		{"an unknown metric gives an empty object", "alpha", url.Values{"metric": {"nope"}}, `{}`},
		{"limit keeps the first families by name", "alpha", url.Values{"limit": {"1"}}, counter + `}`},
		{"limit 0 gives nothing, as in Prometheus", "alpha", url.Values{"limit": {"0"}}, `{}`},
		{"a negative limit means no limit", "alpha", url.Values{"limit": {"-1"}, "limit_per_metric": {"1"}}, counter + `,"other_metric":[{"type":"gauge","help":"Another.","unit":""}]}`},
		{"another tenant sees only its own metadata", "beta", nil, `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, method := range []string{http.MethodGet, http.MethodPost} {
				code, r, body := e.do(t, method, tc.tenant, "/api/v1/metadata", tc.params)
				if code != http.StatusOK || string(r.Data) != tc.want {
					t.Errorf("%s: %d %s, want data %s", method, code, body, tc.want)
				}
			}
		})
	}
	code, r, _ := e.do(t, http.MethodGet, "alpha", "/api/v1/metadata", url.Values{"limit": {"x"}})
	if code != http.StatusBadRequest || r.ErrorType != "bad_data" || r.Error != "limit must be a number" {
		t.Errorf("bad limit: %d %+v", code, r)
	}
}

func TestQueryExemplars(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testConfig())
	want := `[{"seriesLabels":{"__name__":"ferry_test_metric","instance":"i1","job":"a"},` +
		`"exemplars":[{"labels":{"trace_id":"abc"},"value":"3.5","timestamp":1700000001.500}]}]`
	for _, tc := range []struct {
		name   string
		tenant string
		params url.Values
		want   string
	}{
		{"the exemplar of the selected series comes back", "alpha", url.Values{"query": {`rate(ferry_test_metric[5m])`}, "start": {seconds(base)}, "end": {seconds(base + 2000)}}, want},
		{"start and end default to all time", "alpha", url.Values{"query": {`ferry_test_metric{instance="i1"}`}}, want},
		{"a range without exemplars is empty", "alpha", url.Values{"query": {`ferry_test_metric`}, "start": {seconds(base + 2000)}}, `[]`},
		{"a query without selectors is empty", "alpha", url.Values{"query": {`1+1`}}, `[]`},
		{"another tenant does not see them", "beta", url.Values{"query": {`ferry_test_metric`}}, `[]`},
		{"a tenant that never wrote has none", "gamma", url.Values{"query": {`ferry_test_metric`}}, `[]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, method := range []string{http.MethodGet, http.MethodPost} {
				code, r, body := e.do(t, method, tc.tenant, "/api/v1/query_exemplars", tc.params)
				if code != http.StatusOK || string(r.Data) != tc.want {
					t.Errorf("%s: %d %s, want data %s", method, code, body, tc.want)
				}
			}
		})
	}
	for _, tc := range []struct {
		name   string
		params url.Values
	}{
		{"a bad query is bad data", url.Values{"query": {"sum("}}},
		{"end before start is bad data", url.Values{"query": {"x"}, "start": {"10"}, "end": {"5"}}},
		{"a bad start is bad data", url.Values{"query": {"x"}, "start": {"yesterday"}}},
	} {
		code, r, body := e.do(t, http.MethodGet, "alpha", "/api/v1/query_exemplars", tc.params)
		if code != http.StatusBadRequest || r.ErrorType != "bad_data" {
			t.Errorf("%s: %d %s", tc.name, code, body)
		}
	}
}

func TestStatusEndpointsAnswerWithoutTenant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testConfig())
	for path, want := range map[string]string{
		"/api/v1/status/config": `{"yaml":""}`,
		"/api/v1/status/flags":  `{}`,
		"/api/v1/rules":         `{"groups":[]}`,
		"/api/v1/alerts":        `{"alerts":[]}`,
		"/api/v1/targets":       `{"activeTargets":[],"droppedTargets":[]}`,
		"/api/v1/alertmanagers": `{"activeAlertmanagers":[],"droppedAlertmanagers":[]}`,
	} {
		if r := e.get(t, "", path, nil); string(r.Data) != want {
			t.Errorf("%s: %s, want %s", path, r.Data, want)
		}
	}
	ri := decode[map[string]any](t, e.get(t, "", "/api/v1/status/runtimeinfo", nil).Data)
	if ri["reloadConfigSuccess"] != true || ri["GOMAXPROCS"].(float64) < 1 || ri["startTime"] == "" {
		t.Errorf("runtimeinfo %v", ri)
	}
}

func TestFormatQuery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testConfig())
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		code, r, body := e.do(t, method, "", "/api/v1/format_query", url.Values{"query": {`sum(rate(x{a="b"}[5m]))by(job)`}})
		if code != http.StatusOK || string(r.Data) != `"sum by (job) (rate(x{a=\"b\"}[5m]))"` {
			t.Errorf("%s: %d %s", method, code, body)
		}
	}
	code, r, _ := e.do(t, http.MethodGet, "", "/api/v1/format_query", url.Values{"query": {"sum("}})
	if code != http.StatusBadRequest || r.ErrorType != "bad_data" || !strings.HasPrefix(r.Error, `invalid parameter "query"`) {
		t.Errorf("bad query: %d %+v", code, r)
	}
}

func TestUnknownAPIPathsAnswerJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testConfig())
	for _, tc := range []struct {
		name, method, path string
		code               int
		errorType          string
	}{
		{"an unknown endpoint is not_found", http.MethodGet, "/api/v1/status/tsdb", http.StatusNotFound, "not_found"},
		{"a path deep under the API is not_found", http.MethodPost, "/api/v1/admin/tsdb/delete_series", http.StatusNotFound, "not_found"},
		{"a known endpoint with another method is 405", http.MethodDelete, "/api/v1/metadata", http.StatusMethodNotAllowed, "method_not_allowed"},
		{"label values with another method is 405", http.MethodPut, "/api/v1/label/job/values", http.StatusMethodNotAllowed, "method_not_allowed"},
		{"remote read by GET is 405", http.MethodGet, "/api/v1/read", http.StatusMethodNotAllowed, "method_not_allowed"},
		{"a status endpoint by POST is 405", http.MethodPost, "/api/v1/status/buildinfo", http.StatusMethodNotAllowed, "method_not_allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, r, body := e.do(t, tc.method, "alpha", tc.path, nil)
			if code != tc.code || r.Status != "error" || r.ErrorType != tc.errorType || r.Error == "" {
				t.Errorf("%d %s, want %d %s", code, body, tc.code, tc.errorType)
			}
		})
	}
}

func TestDefaultTenant(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.DefaultTenant = "beta"
	e := newEnv(t, cfg)
	count := func(tenant string) string {
		r := e.get(t, tenant, "/api/v1/query", url.Values{"query": {`count({__name__=~".+"})`}, "time": {seconds(base)}})
		vec := decode[[]vectorSample](t, decode[queryResult](t, r.Data).Result)
		_, v := point(t, vec[0].Value)
		return v
	}
	if got := count(""); got != "1" {
		t.Errorf("without a header: %s series, want beta's 1", got)
	}
	if got := count("alpha"); got != "4" {
		t.Errorf("with X-Scope-OrgID alpha: %s series, want alpha's 4", got)
	}
}

func TestConfigValidatesDefaultTenant(t *testing.T) {
	t.Parallel()
	for _, tenant := range []string{"..", "a/b", "."} {
		cfg := testConfig()
		cfg.DefaultTenant = tenant
		if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "-query.default-tenant") {
			t.Errorf("%q: %v", tenant, err)
		}
	}
	cfg := testConfig()
	cfg.DefaultTenant = "anonymous"
	if err := cfg.Validate(); err != nil {
		t.Errorf("anonymous: %v", err)
	}
}
