package queryapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/util/annotations"

	ferrytenant "github.com/ferrylabs/ferry/internal/tenant"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// TenantHeader names the tenant a request reads from. It is the header
// Cortex, Mimir and Thanos use, so Grafana's data source settings and
// promtool's --http.config.file can set it without changes.
const TenantHeader = "X-Scope-OrgID"

// Source gives the storage of one tenant: the backend.Querier a backend
// offers when it keeps data that can be queried (tsdbstore.Store does).
type Source = backend.Querier

// API serves the Prometheus HTTP API subset over a Source. It is safe for
// concurrent use.
type API struct {
	src    Source
	logger *slog.Logger
	engine *promql.Engine
	parser parser.Parser
	cfg    Config
	// slots bounds the queries evaluating at once: the engine's and the
	// remote reads, which bypass the engine, share it.
	slots *limiter
	// streamHold is how many bytes of a streamed remote read are held
	// back before the first write; tests lower it.
	streamHold int

	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	build    buildInfo
}

// New returns an API evaluating PromQL with one engine shared by all
// tenants, so that the concurrency and sample limits bound the process as
// a whole. It registers its metrics and the engine's prometheus_engine_*
// metrics on reg (which may be nil), so call it once per registry.
func New(cfg Config, src Source, logger *slog.Logger, reg prometheus.Registerer) (*API, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if src == nil {
		return nil, errors.New("queryapi: nil Source")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &API{
		src:    src,
		logger: logger,
		cfg:    cfg,
		slots:  newLimiter(cfg.MaxConcurrency),
		// A frame's worth: bounded memory, and most failing reads still
		// get a plain error answer.
		streamHold: maxBytesInFrame,
		parser:     newParser(cfg),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_pusher_query_requests_total",
			Help: "Query API requests by endpoint and HTTP status code.",
		}, []string{"endpoint", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ferry_pusher_query_request_duration_seconds",
			Help:    "Time to answer a query API request, by endpoint.",
			Buckets: []float64{.005, .025, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"endpoint"}),
		build: newBuildInfo(),
	}
	if reg != nil {
		// Registering ours first turns a second New on the same registry
		// into an error instead of the engine's MustRegister panic.
		for _, c := range []prometheus.Collector{a.requests, a.duration} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("queryapi: registering metrics: %w", err)
			}
		}
	}
	a.engine = promql.NewEngine(promql.EngineOpts{
		Logger:             logger,
		Reg:                reg,
		MaxSamples:         cfg.MaxSamples,
		Timeout:            cfg.Timeout,
		ActiveQueryTracker: a.slots,
		LookbackDelta:      cfg.LookbackDelta,
		// Both are standard PromQL since Prometheus 2.33; dashboards
		// written against Prometheus use them.
		EnableAtModifier:     true,
		EnableNegativeOffset: true,
		// Subqueries without a step use this resolution; Prometheus uses
		// its global evaluation interval, whose default is one minute.
		NoStepSubqueryIntervalFn: func(int64) int64 { return time.Minute.Milliseconds() },
		// One parser for the engine and for match[], so both accept the
		// same syntax within the same bounds.
		Parser: a.parser,
	})
	return a, nil
}

// Register adds the API's routes to mux. Each endpoint accepts GET with URL
// parameters and POST with a form body, as Prometheus does; Grafana uses
// POST so that long queries do not hit URL length limits.
func (a *API) Register(mux *http.ServeMux) {
	routes := []struct {
		path, endpoint string
		fn             handlerFunc
	}{
		{"/api/v1/query", "query", a.query},
		{"/api/v1/query_range", "query_range", a.queryRange},
		{"/api/v1/series", "series", a.series},
		{"/api/v1/labels", "labels", a.labelNames},
		{"/api/v1/label/{name}/values", "label_values", a.labelValues},
		{"/api/v1/metadata", "metadata", a.metadata},
		{"/api/v1/query_exemplars", "query_exemplars", a.queryExemplars},
	}
	for _, rt := range routes {
		h := a.instrument(rt.endpoint, a.wrap(rt.fn))
		mux.Handle("GET "+rt.path, h)
		mux.Handle("POST "+rt.path, h)
	}
	a.registerStatus(mux)
	mux.Handle("POST /api/v1/read", a.instrument("read", http.HandlerFunc(a.serveRead)))
}

// result is what an endpoint produces. finalize, when set, releases the
// memory data points into (query results, querier strings) and therefore
// runs only after the response is written.
type result struct {
	data     any
	warnings annotations.Annotations
	err      *apiError
	finalize func()
}

type handlerFunc func(r *http.Request, tenant string) result

// instrument counts and times requests of one endpoint.
func (a *API) instrument(endpoint string, h http.Handler) http.Handler {
	l := prometheus.Labels{"endpoint": endpoint}
	return promhttp.InstrumentHandlerCounter(a.requests.MustCurryWith(l),
		promhttp.InstrumentHandlerDuration(a.duration.MustCurryWith(l), h))
}

// wrap authenticates the tenant, parses the form and writes the endpoint's
// result as Prometheus JSON.
func (a *API) wrap(fn handlerFunc) http.Handler { return a.handler(fn, true) }

// handler is wrap for endpoints that read no tenant data when tenanted is
// false: they answer without X-Scope-OrgID, and fn gets an empty tenant.
func (a *API) handler(fn handlerFunc, tenanted bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var tenant string
		if tenanted {
			var apiErr *apiError
			if tenant, apiErr = a.tenant(r); apiErr != nil {
				a.writeError(w, r, apiErr)
				return
			}
		}
		if err := r.ParseForm(); err != nil {
			a.writeError(w, r, badData(fmt.Errorf("error parsing form values: %w", err)))
			return
		}
		res := fn(r, tenant)
		if res.finalize != nil {
			defer res.finalize()
		}
		if res.err != nil {
			a.writeError(w, r, res.err)
			return
		}
		// Positions in annotations refer to the query text.
		warnings, infos := res.warnings.AsStrings(r.FormValue("query"), 10, 10)
		body, err := appendSuccess(make([]byte, 0, 1024), res.data, warnings, infos)
		if err != nil {
			a.writeError(w, r, &apiError{errorInternal, fmt.Errorf("encoding response: %w", err)})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		if _, err := w.Write(body); err != nil {
			a.logger.Debug("query api: writing response", "path", r.URL.Path, "err", err)
		}
	})
}

// tenant returns the tenant a request reads from. It is the one place that
// decides it, for every endpoint that reads tenant data.
func (a *API) tenant(r *http.Request) (string, *apiError) {
	tenant := r.Header.Get(TenantHeader)
	if tenant == "" {
		tenant = a.cfg.DefaultTenant
	}
	if tenant == "" {
		return "", &apiError{errorUnauthorized, fmt.Errorf("missing %s header: set it to the tenant ID to query", TenantHeader)}
	}
	if err := ferrytenant.Validate(tenant); err != nil {
		return "", badData(fmt.Errorf("%s header: %w", TenantHeader, err))
	}
	return tenant, nil
}

func (a *API) writeError(w http.ResponseWriter, r *http.Request, e *apiError) {
	if e.typ == errorInternal {
		a.logger.Error("query api: internal error", "path", r.URL.Path, "err", e.err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.typ.httpStatus())
	if _, err := w.Write(appendError(nil, e)); err != nil {
		a.logger.Debug("query api: writing error response", "path", r.URL.Path, "err", err)
	}
}

// queryContext applies the request's optional timeout parameter. The
// engine's -query.timeout applies on top, so the shorter one wins.
func queryContext(r *http.Request) (context.Context, context.CancelFunc, *apiError) {
	v := r.FormValue("timeout")
	if v == "" {
		return r.Context(), func() {}, nil
	}
	d, err := parseDuration(v)
	if err != nil {
		return nil, nil, invalidParam("timeout", err)
	}
	if d <= 0 {
		return nil, nil, invalidParam("timeout", fmt.Errorf("timeout must be positive, got %s", d))
	}
	ctx, cancel := context.WithTimeout(r.Context(), d)
	return ctx, cancel, nil
}

// queryOpts honours the per-query lookback_delta parameter that Grafana
// and Prometheus' UI may send.
func queryOpts(r *http.Request) (promql.QueryOpts, *apiError) {
	var lookback time.Duration
	if v := r.FormValue("lookback_delta"); v != "" {
		d, err := parseDuration(v)
		if err != nil {
			return nil, badData(fmt.Errorf("error parsing lookback delta duration: %w", err))
		}
		lookback = d
	}
	return promql.NewPrometheusQueryOpts(false, lookback, nil), nil
}

// query serves /api/v1/query: an instant query at the time parameter,
// which defaults to now.
func (a *API) query(r *http.Request, tenant string) result {
	ts, apiErr := timeParam(r, "time", time.Now())
	if apiErr != nil {
		return result{err: apiErr}
	}
	ctx, cancel, apiErr := queryContext(r)
	if apiErr != nil {
		return result{err: apiErr}
	}
	defer cancel()
	opts, apiErr := queryOpts(r)
	if apiErr != nil {
		return result{err: apiErr}
	}
	qry, err := a.engine.NewInstantQuery(ctx, a.src.Queryable(tenant), opts, r.FormValue("query"), ts)
	if err != nil {
		return result{err: constructionError(err)}
	}
	return execQuery(ctx, qry)
}

// queryRange serves /api/v1/query_range.
func (a *API) queryRange(r *http.Request, tenant string) result {
	start, err := parseTime(r.FormValue("start"))
	if err != nil {
		return result{err: invalidParam("start", err)}
	}
	end, err := parseTime(r.FormValue("end"))
	if err != nil {
		return result{err: invalidParam("end", err)}
	}
	if end.Before(start) {
		return result{err: invalidParam("end", errors.New("end timestamp must not be before start time"))}
	}
	step, err := parseDuration(r.FormValue("step"))
	if err != nil {
		return result{err: invalidParam("step", err)}
	}
	if step <= 0 {
		return result{err: invalidParam("step", errors.New("zero or negative query resolution step widths are not accepted. Try a positive integer"))}
	}
	if end.Sub(start)/step > maxPointsPerSeries {
		return result{err: badData(errors.New("exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)"))}
	}
	ctx, cancel, apiErr := queryContext(r)
	if apiErr != nil {
		return result{err: apiErr}
	}
	defer cancel()
	opts, apiErr := queryOpts(r)
	if apiErr != nil {
		return result{err: apiErr}
	}
	qry, err := a.engine.NewRangeQuery(ctx, a.src.Queryable(tenant), opts, r.FormValue("query"), start, end, step)
	if err != nil {
		return result{err: constructionError(err)}
	}
	return execQuery(ctx, qry)
}

// execQuery runs qry. The query is closed only after the response is
// written, because Close returns the result's memory to pools.
func execQuery(ctx context.Context, qry promql.Query) result {
	res := qry.Exec(ctx)
	if res.Err != nil {
		return result{err: execError(res.Err), finalize: qry.Close}
	}
	return result{data: queryData{res.Value}, warnings: res.Warnings, finalize: qry.Close}
}
