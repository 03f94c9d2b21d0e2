package queryapi

import (
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// metricMetadata is one entry of /api/v1/metadata, with Prometheus' field
// names and its lower-case type names.
type metricMetadata struct {
	Type string `json:"type"`
	Help string `json:"help"`
	Unit string `json:"unit"`
}

// metadata serves /api/v1/metadata: the metadata of each metric family,
// or of the one named by the metric parameter. Ferry keeps the latest
// metadata per family, so every family has one entry: limit_per_metric is
// checked but cannot cut anything (Prometheus treats 0 as no limit too).
func (a *API) metadata(r *http.Request, tenant string) result {
	limit, apiErr := intParam(r, "limit")
	if apiErr != nil {
		return result{err: apiErr}
	}
	if _, apiErr := intParam(r, "limit_per_metric"); apiErr != nil {
		return result{err: apiErr}
	}
	all := a.src.Metadata(tenant)
	metric := r.FormValue("metric")
	if metric != "" {
		md, ok := all[metric]
		all = map[string]prompb.MetricMetadata{}
		if ok {
			all[metric] = md
		}
	}
	// Prometheus picks the families kept under limit in map order; sorting
	// first makes the choice repeatable.
	out := make(map[string][]metricMetadata, len(all))
	for _, name := range slices.Sorted(maps.Keys(all)) {
		if limit >= 0 && len(out) >= limit {
			break
		}
		md := all[name]
		out[name] = []metricMetadata{{Type: metricType(md.Type), Help: md.Help, Unit: md.Unit}}
	}
	return result{data: out}
}

// intParam parses an optional integer parameter whose absence, like any
// negative value, means no limit, as in Prometheus' metadata endpoint.
func intParam(r *http.Request, name string) (int, *apiError) {
	v := r.FormValue(name)
	if v == "" {
		return -1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, badData(errors.New(name + " must be a number"))
	}
	return n, nil
}

// metricType turns the remote-write enum into the names of Prometheus'
// model.MetricType ("counter", "gaugehistogram", ...).
func metricType(t prompb.MetricMetadata_MetricType) string {
	name, ok := prompb.MetricMetadata_MetricType_name[int32(t)]
	if !ok || t == prompb.MetricMetadata_METRIC_TYPE_UNKNOWN_UNSPECIFIED {
		return "unknown"
	}
	return strings.ToLower(strings.TrimPrefix(name, "METRIC_TYPE_"))
}
