package queryapi

// The status endpoints answer what a Prometheus server with no rules, no
// alerting and no scrape targets answers. Grafana calls them when a data
// source is saved and from its metric browser and alerting views; an
// error there would make Grafana report the data source as broken, and a
// Go mux 404 page would not even parse as the API's JSON.

import (
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// registerStatus adds the endpoints that need no tenant, and the answer
// for every other path under /api/v1/.
func (a *API) registerStatus(mux *http.ServeMux) {
	start := time.Now()
	static := []struct {
		path, endpoint string
		data           any
	}{
		// Ferry has no configuration file; an empty one is what a
		// Prometheus started without one reports.
		{"/api/v1/status/config", "status_config", map[string]string{"yaml": ""}},
		{"/api/v1/status/flags", "status_flags", map[string]string{}},
		{"/api/v1/rules", "rules", map[string][]struct{}{"groups": {}}},
		{"/api/v1/alerts", "alerts", map[string][]struct{}{"alerts": {}}},
		{"/api/v1/targets", "targets", map[string][]struct{}{"activeTargets": {}, "droppedTargets": {}}},
		{"/api/v1/alertmanagers", "alertmanagers", map[string][]struct{}{"activeAlertmanagers": {}, "droppedAlertmanagers": {}}},
	}
	for _, st := range static {
		data := st.data
		a.handleStatus(mux, "GET "+st.path, st.endpoint, func(*http.Request, string) result { return result{data: data} })
	}
	a.handleStatus(mux, "GET /api/v1/status/runtimeinfo", "status_runtimeinfo", func(*http.Request, string) result {
		return result{data: newRuntimeInfo(start)}
	})
	a.handleStatus(mux, "GET /api/v1/status/buildinfo", "buildinfo", func(*http.Request, string) result {
		return result{data: a.build}
	})
	a.handleStatus(mux, "GET /api/v1/format_query", "format_query", a.formatQuery)
	a.handleStatus(mux, "POST /api/v1/format_query", "format_query", a.formatQuery)
	mux.Handle("/api/v1/", a.instrument("unknown", http.HandlerFunc(a.serveUnknown)))
}

func (a *API) handleStatus(mux *http.ServeMux, pattern, endpoint string, fn handlerFunc) {
	mux.Handle(pattern, a.instrument(endpoint, a.handler(fn, false)))
}

// formatQuery serves /api/v1/format_query: the query as Prometheus'
// pretty-printer lays it out.
func (a *API) formatQuery(r *http.Request, _ string) result {
	expr, err := a.parser.ParseExpr(r.FormValue("query"))
	if err != nil {
		return result{err: invalidParam("query", err)}
	}
	return result{data: expr.Pretty(0)}
}

// knownPaths are the endpoints whose other methods are answered 405 rather
// than 404: the catch-all pattern /api/v1/ is what the mux picks for a
// known path with a method it has no pattern for.
var knownPaths = map[string]bool{
	"/api/v1/query": true, "/api/v1/query_range": true, "/api/v1/series": true,
	"/api/v1/labels": true, "/api/v1/metadata": true, "/api/v1/query_exemplars": true,
	"/api/v1/read": true, "/api/v1/format_query": true,
	"/api/v1/status/buildinfo": true, "/api/v1/status/config": true, "/api/v1/status/flags": true,
	"/api/v1/status/runtimeinfo": true, "/api/v1/rules": true, "/api/v1/alerts": true,
	"/api/v1/targets": true, "/api/v1/alertmanagers": true,
}

// serveUnknown answers paths under /api/v1/ that no endpoint serves, in
// the API's JSON error shape so that clients show the message instead of
// failing to parse an HTML or plain-text page.
func (a *API) serveUnknown(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if knownPaths[p] || (strings.HasPrefix(p, "/api/v1/label/") && strings.HasSuffix(p, "/values")) {
		a.writeError(w, r, &apiError{errorMethodNotAllowed, fmt.Errorf("method %s not allowed for %s", r.Method, p)})
		return
	}
	a.writeError(w, r, &apiError{errorNotFound, fmt.Errorf("unknown API endpoint %s: Ferry serves the query, metadata, exemplar, status and remote-read endpoints of the Prometheus HTTP API", p)})
}

// runtimeInfo is the "data" of /api/v1/status/runtimeinfo, with the
// fields of Prometheus' answer that mean something for Ferry.
type runtimeInfo struct {
	StartTime           time.Time `json:"startTime"`
	CWD                 string    `json:"CWD"`
	ReloadConfigSuccess bool      `json:"reloadConfigSuccess"`
	LastConfigTime      time.Time `json:"lastConfigTime"`
	CorruptionCount     int64     `json:"corruptionCount"`
	GoroutineCount      int       `json:"goroutineCount"`
	GOMAXPROCS          int       `json:"GOMAXPROCS"`
	GOMEMLIMIT          int64     `json:"GOMEMLIMIT"`
	GOGC                string    `json:"GOGC"`
	GODEBUG             string    `json:"GODEBUG"`
	StorageRetention    string    `json:"storageRetention"`
}

func newRuntimeInfo(start time.Time) runtimeInfo {
	cwd, _ := os.Getwd() // Informational only; empty when unknown.
	return runtimeInfo{
		StartTime:           start,
		CWD:                 cwd,
		ReloadConfigSuccess: true,
		LastConfigTime:      start,
		GoroutineCount:      runtime.NumGoroutine(),
		GOMAXPROCS:          runtime.GOMAXPROCS(0),
		GOMEMLIMIT:          debug.SetMemoryLimit(-1),
		GOGC:                os.Getenv("GOGC"),
		GODEBUG:             os.Getenv("GODEBUG"),
	}
}

// newBuildInfo reports, as "version", the Prometheus release whose query
// engine Ferry embeds: Grafana reads it to decide which PromQL features
// and API parameters it may use, and that is what the engine supports.
func newBuildInfo() buildInfo {
	b := buildInfo{Version: "3.0.0", GoVersion: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	for _, m := range info.Deps {
		if m.Path == "github.com/prometheus/prometheus" {
			if v, ok := prometheusRelease(m.Version); ok {
				b.Version = v
			}
		}
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.BuildDate = s.Value
		}
	}
	return b
}

// prometheusRelease maps the Go module version of Prometheus, v0.MMmm.p,
// to its release MM.mm.p (v0.316.0 is Prometheus 3.16.0).
func prometheusRelease(modVersion string) (string, bool) {
	rest, ok := strings.CutPrefix(modVersion, "v0.")
	if !ok {
		return "", false
	}
	minorStr, patch, ok := strings.Cut(rest, ".")
	if !ok {
		return "", false
	}
	n, err := strconv.Atoi(minorStr)
	if err != nil || n < 100 {
		return "", false
	}
	if i := strings.IndexAny(patch, "-+"); i >= 0 {
		patch = patch[:i]
	}
	return fmt.Sprintf("%d.%d.%s", n/100, n%100, patch), true
}
