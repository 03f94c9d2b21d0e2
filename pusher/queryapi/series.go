package queryapi

// The series and label endpoints: what Grafana's metric browser and
// promtool's series and labels commands read.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/timestamp"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"
)

// timeRange parses the optional start and end of the metadata endpoints,
// which default to all time.
func timeRange(r *http.Request) (mint, maxt int64, apiErr *apiError) {
	start, apiErr := timeParam(r, "start", minTime)
	if apiErr != nil {
		return 0, 0, apiErr
	}
	end, apiErr := timeParam(r, "end", maxTime)
	if apiErr != nil {
		return 0, 0, apiErr
	}
	return timestamp.FromTime(start), timestamp.FromTime(end), nil
}

// series serves /api/v1/series: the label sets of the series matching any
// match[] selector.
func (a *API) series(r *http.Request, tenant string) result {
	if len(r.Form["match[]"]) == 0 {
		return result{err: badData(errors.New("no match[] parameter provided"))}
	}
	limit, apiErr := limitParam(r)
	if apiErr != nil {
		return result{err: apiErr}
	}
	mint, maxt, apiErr := timeRange(r)
	if apiErr != nil {
		return result{err: apiErr}
	}
	sets, err := parseMatchers(a.parser, r.Form["match[]"])
	if err != nil {
		return result{err: invalidParam("match[]", err)}
	}
	q, err := a.src.Queryable(tenant).Querier(mint, maxt)
	if err != nil {
		return result{err: execError(err)}
	}
	// The labels point into the querier's memory until it is closed.
	res := result{finalize: func() { _ = q.Close() }}

	ctx := r.Context()
	hints := &storage.SelectHints{
		Start: mint,
		End:   maxt,
		Func:  "series", // Asks storage for labels only, no samples.
		Limit: hintLimit(limit),
	}
	var set storage.SeriesSet
	if len(sets) == 1 {
		set = q.Select(ctx, false, hints, sets[0]...)
	} else {
		// Several selectors can match the same series; merging sorted
		// sets removes the duplicates.
		all := make([]storage.SeriesSet, 0, len(sets))
		for _, ms := range sets {
			all = append(all, q.Select(ctx, true, hints, ms...))
		}
		set = storage.NewMergeSeriesSet(all, 0, storage.ChainedSeriesMerge)
	}
	metrics := []labels.Labels{}
	for set.Next() {
		if len(metrics)%1024 == 0 {
			if err := ctx.Err(); err != nil {
				res.err = execError(err)
				return res
			}
		}
		if limit > 0 && len(metrics) == limit {
			res.warnings.Add(errors.New("results truncated due to limit"))
			break
		}
		metrics = append(metrics, set.At().Labels())
	}
	if err := set.Err(); err != nil {
		res.err = execError(err)
		return res
	}
	res.warnings.Merge(set.Warnings())
	res.data = metrics
	return res
}

// labelNames serves /api/v1/labels: the sorted label names of the series
// matching any match[] selector, or of all series.
func (a *API) labelNames(r *http.Request, tenant string) result {
	return a.labelQuery(r, tenant, func(ctx context.Context, q storage.Querier, hints *storage.LabelHints, ms []*labels.Matcher) ([]string, annotations.Annotations, error) {
		return q.LabelNames(ctx, hints, ms...)
	})
}

// labelValues serves /api/v1/label/{name}/values: the sorted values of one
// label.
func (a *API) labelValues(r *http.Request, tenant string) result {
	name := r.PathValue("name")
	// Clients escape names that are not valid legacy names this way,
	// because such names cannot always appear in a URL path as they are.
	if strings.HasPrefix(name, "U__") {
		name = model.UnescapeName(name, model.ValueEncodingEscaping)
	}
	if !model.UTF8Validation.IsValidLabelName(name) {
		return result{err: badData(fmt.Errorf("invalid label name: %q", name))}
	}
	return a.labelQuery(r, tenant, func(ctx context.Context, q storage.Querier, hints *storage.LabelHints, ms []*labels.Matcher) ([]string, annotations.Annotations, error) {
		return q.LabelValues(ctx, name, hints, ms...)
	})
}

type labelFunc func(context.Context, storage.Querier, *storage.LabelHints, []*labels.Matcher) ([]string, annotations.Annotations, error)

// labelQuery runs fn once per match[] selector (or once without matchers)
// and returns the sorted union of the results.
func (a *API) labelQuery(r *http.Request, tenant string, fn labelFunc) result {
	limit, apiErr := limitParam(r)
	if apiErr != nil {
		return result{err: apiErr}
	}
	mint, maxt, apiErr := timeRange(r)
	if apiErr != nil {
		return result{err: apiErr}
	}
	sets, err := parseMatchers(a.parser, r.Form["match[]"])
	if err != nil {
		return result{err: badData(err)}
	}
	q, err := a.src.Queryable(tenant).Querier(mint, maxt)
	if err != nil {
		return result{err: execError(err)}
	}
	// The strings may point into the querier's memory until it is closed.
	res := result{finalize: func() { _ = q.Close() }}

	ctx := r.Context()
	hints := &storage.LabelHints{Limit: hintLimit(limit)}
	var names []string
	if len(sets) <= 1 {
		var ms []*labels.Matcher
		if len(sets) == 1 {
			ms = sets[0]
		}
		names, res.warnings, err = fn(ctx, q, hints, ms)
		if err != nil {
			res.err = execError(err)
			return res
		}
		// Storage returns sorted names, but sorting is cheap and makes the
		// order a property of this API rather than of the storage.
		slices.Sort(names)
	} else {
		union := map[string]struct{}{}
		for _, ms := range sets {
			vals, ws, err := fn(ctx, q, hints, ms)
			if err != nil {
				res.err = execError(err)
				return res
			}
			res.warnings.Merge(ws)
			for _, v := range vals {
				union[v] = struct{}{}
			}
		}
		names = make([]string, 0, len(union))
		for v := range union {
			names = append(names, v)
		}
		slices.Sort(names)
	}
	if names == nil {
		names = []string{} // "data":[] rather than null.
	}
	if limit > 0 && len(names) > limit {
		names = names[:limit]
		res.warnings.Add(errors.New("results truncated due to limit"))
	}
	res.data = names
	return res
}
