package queryapi

import (
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// /api/v1/status/buildinfo: the Prometheus version Ferry's query engine
// comes from, so that Grafana picks the features it may use.

// serveBuildInfo answers /api/v1/status/buildinfo.
func (a *API) serveBuildInfo(w http.ResponseWriter, r *http.Request) {
	body, err := appendSuccess(nil, a.build, nil, nil)
	if err != nil {
		a.writeError(w, r, &apiError{errorInternal, err})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
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
