package queryapi

import (
	"errors"
	"net/http"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/timestamp"
	"github.com/prometheus/prometheus/promql/parser"
)

// queryExemplars serves /api/v1/query_exemplars: the exemplars of the
// series every selector of the query selects, between start and end
// (all time by default). Grafana calls it with the panel's query to draw
// exemplar markers that link to traces.
func (a *API) queryExemplars(r *http.Request, tenant string) result {
	start, apiErr := timeParam(r, "start", minTime)
	if apiErr != nil {
		return result{err: apiErr}
	}
	end, apiErr := timeParam(r, "end", maxTime)
	if apiErr != nil {
		return result{err: apiErr}
	}
	if end.Before(start) {
		return result{err: badData(errors.New("end timestamp must not be before start timestamp"))}
	}
	expr, err := a.parser.ParseExpr(r.FormValue("query"))
	if err != nil {
		return result{err: badData(err)}
	}
	selectors := parser.ExtractSelectors(expr)
	if len(selectors) == 0 {
		return result{data: []exemplar.QueryResult{}}
	}
	ctx, cancel, apiErr := queryContext(r)
	if apiErr != nil {
		return result{err: apiErr}
	}
	defer cancel()
	eq, err := a.src.ExemplarQueryable(tenant).ExemplarQuerier(ctx)
	if err != nil {
		return result{err: execError(err)}
	}
	res, err := eq.Select(timestamp.FromTime(start), timestamp.FromTime(end), selectors...)
	if err != nil {
		return result{err: execError(err)}
	}
	if res == nil {
		res = []exemplar.QueryResult{} // "data":[] rather than null.
	}
	return result{data: res}
}

// appendExemplars writes exemplar results in Prometheus' layout: values as
// strings and timestamps as unix seconds, like samples.
func appendExemplars(b []byte, res []exemplar.QueryResult) []byte {
	b = append(b, '[')
	for i, r := range res {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"seriesLabels":`...)
		b = appendLabels(b, r.SeriesLabels)
		b = append(b, `,"exemplars":[`...)
		for j, e := range r.Exemplars {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"labels":`...)
			b = appendLabels(b, e.Labels)
			b = append(b, `,"value":`...)
			b = appendFloat(b, e.Value)
			b = append(b, `,"timestamp":`...)
			b = appendTimestamp(b, e.Ts)
			b = append(b, '}')
		}
		b = append(b, "]}"...)
	}
	return append(b, ']')
}
