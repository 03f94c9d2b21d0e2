package tsdbstore

import (
	"context"
	"slices"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"
)

// Reads of a TSDB shared by every tenant (-storage.tenancy=shared): every
// stored series carries tenantLabel, and the views below show one tenant
// exactly as if it had a TSDB of its own. They add the tenant's matcher to
// every read and remove tenantLabel from everything they return.
//
// A caller's matcher on tenantLabel is judged as if the label did not
// exist, since in the tenant's own TSDB it would not: one that matches the
// empty value (`=""`, `!="b"`, `=~".*"`) holds for every series of the
// tenant and is dropped; any other (`="b"`, `=~".+"`, even `="<own id>"`)
// matches no series, so the read returns nothing without asking the TSDB.
// Either way the tenant's own matcher is ANDed to what is left, so no
// matcher a caller writes can reach another tenant's series.

// tenantLabel names a series' tenant in a TSDB shared by every tenant (-storage.tenancy=shared).
const tenantLabel = "__ferry_tenant__"

// tenantQuerier returns q restricted to the tenant's series, with tenantLabel removed from everything it returns.
func tenantQuerier(q storage.Querier, tenant string) storage.Querier {
	return &sharedQuerier{q: q, tenant: labels.MustNewMatcher(labels.MatchEqual, tenantLabel, tenant)}
}

// tenantExemplarQuerier: the same for exemplars.
func tenantExemplarQuerier(q storage.ExemplarQuerier, tenant string) storage.ExemplarQuerier {
	return &sharedExemplarQuerier{q: q, tenant: labels.MustNewMatcher(labels.MatchEqual, tenantLabel, tenant)}
}

// withTenant returns the matchers of a read restricted to the tenant, and
// false if a matcher on tenantLabel rules out every series (see above).
// The result is a new slice: the caller's is not ours to change.
func withTenant(tenant *labels.Matcher, ms []*labels.Matcher) ([]*labels.Matcher, bool) {
	out := make([]*labels.Matcher, 0, len(ms)+1)
	out = append(out, tenant)
	for _, m := range ms {
		if m.Name != tenantLabel {
			out = append(out, m)
			continue
		}
		if !m.Matches("") {
			return nil, false
		}
	}
	return out, true
}

// withoutTenant returns ls without tenantLabel. Stored labels are sorted
// by name and tenantLabel sorts before every name that starts with a
// lower-case letter and before __name__, so it is nearly always the first
// label and DropReserved returns the rest without copying; otherwise it
// makes one copy, the only allocation of its own per series this view
// makes (sharedSeriesSet.At allocates its series in blocks).
func withoutTenant(ls labels.Labels) labels.Labels {
	return ls.DropReserved(isTenantLabel)
}

func isTenantLabel(name string) bool { return name == tenantLabel }

// sharedQuerier is the view of one tenant of a shared TSDB.
type sharedQuerier struct {
	q      storage.Querier
	tenant *labels.Matcher // tenantLabel == the tenant's ID
}

// Select returns the tenant's series matching ms, without tenantLabel.
//
// Sorted results stay sorted. Label sets compare pair by pair in name
// order, and every series here has the same tenantLabel pair p. Removing p
// from two sets X and Y changes how they compare in one case only: X's
// pairs before p are a proper prefix of Y's, and X has no pair after p.
// X was then the larger (p against a smaller name of Y) and becomes the
// smaller (a prefix of Y). Otherwise the first difference lies before p,
// or the sets agree up to p and go on alike after it, or X's next pair
// after p still sorts above Y's pair there, as p did. Every stored series
// has a metric name, which the pusher requires, and __name__ sorts after
// __ferry_tenant__, so no series ends at p and the order is kept.
func (s *sharedQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	ms, ok := withTenant(s.tenant, ms)
	if !ok {
		return storage.EmptySeriesSet()
	}
	return &sharedSeriesSet{SeriesSet: s.q.Select(ctx, sortSeries, hints, ms...)}
}

// LabelNames returns the names of the tenant's series matching ms, without
// tenantLabel.
func (s *sharedQuerier) LabelNames(ctx context.Context, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	ms, ok := withTenant(s.tenant, ms)
	if !ok {
		return nil, nil, nil
	}
	var limit int
	if hints != nil && hints.Limit > 0 {
		// tenantLabel is among the names the TSDB returns and is removed
		// below: ask for one more, or a limit of n would return n-1 names
		// while the tenant has more.
		limit = hints.Limit
		h := *hints
		h.Limit++
		hints = &h
	}
	names, ws, err := s.q.LabelNames(ctx, hints, ms...)
	if err != nil {
		return nil, ws, err
	}
	if i := slices.Index(names, tenantLabel); i == 0 {
		names = names[1:]
	} else if i > 0 {
		// Copy rather than shift in place: the slice belongs to the querier
		// below, which may hand it out again.
		names = slices.Concat(names[:i], names[i+1:])
	}
	if limit > 0 && len(names) > limit {
		names = names[:limit]
	}
	return names, ws, nil
}

// LabelValues returns the values of label name in the tenant's series
// matching ms; none for tenantLabel, which the tenant's series do not have.
func (s *sharedQuerier) LabelValues(ctx context.Context, name string, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	if name == tenantLabel {
		return nil, nil, nil
	}
	ms, ok := withTenant(s.tenant, ms)
	if !ok {
		return nil, nil, nil
	}
	return s.q.LabelValues(ctx, name, hints, ms...)
}

// Close closes the querier below.
func (s *sharedQuerier) Close() error {
	return s.q.Close()
}

// sharedSeriesSet removes tenantLabel from the series of the set below; its
// Err and Warnings are the set's own.
type sharedSeriesSet struct {
	storage.SeriesSet
	// free holds the series At hands out next. They are allocated in
	// blocks that grow with the set, up to maxSharedSeriesBlock, so that
	// the view costs a fraction of an allocation per series rather than
	// one on top of the series' labels. A series the caller keeps keeps
	// its block, at most maxSharedSeriesBlock series, alive with it.
	free  []sharedSeries
	block int
}

// maxSharedSeriesBlock bounds a block of sharedSeries to 8 KiB. Blocks
// hold 2^k-1 series: with the default stringlabels a sharedSeries is 32
// bytes, and 2^k-1 of them plus the 8-byte header Go's allocator adds to
// an object over 512 bytes that holds pointers fill a size class exactly,
// where 2^k of them would take the next class, up to 16% more.
const maxSharedSeriesBlock = 255

func (s *sharedSeriesSet) At() storage.Series {
	if len(s.free) == 0 {
		s.block = min(max(2*s.block+1, 7), maxSharedSeriesBlock)
		s.free = make([]sharedSeries, s.block)
	}
	in := s.SeriesSet.At()
	out := &s.free[0]
	s.free = s.free[1:]
	// The labels are worked out here, once, rather than in each call of
	// Labels: promql and the merge code call it several times per series.
	*out = sharedSeries{Series: in, ls: withoutTenant(in.Labels())}
	return out
}

// sharedSeries is a series of the set below with other labels; its samples
// are the series' own, not copied.
type sharedSeries struct {
	storage.Series
	ls labels.Labels
}

func (s *sharedSeries) Labels() labels.Labels { return s.ls }

// sharedExemplarQuerier is the view of one tenant's exemplars in a shared
// TSDB.
type sharedExemplarQuerier struct {
	q      storage.ExemplarQuerier
	tenant *labels.Matcher
}

// Select returns the exemplars of the tenant's series that match one of
// the matcher sets, their series labels without tenantLabel. No matcher
// sets select nothing, as in Prometheus; a set that rules out every series
// by a matcher on tenantLabel is left out.
func (s *sharedExemplarQuerier) Select(start, end int64, sets ...[]*labels.Matcher) ([]exemplar.QueryResult, error) {
	restricted := make([][]*labels.Matcher, 0, len(sets))
	for _, ms := range sets {
		if ms, ok := withTenant(s.tenant, ms); ok {
			restricted = append(restricted, ms)
		}
	}
	if len(restricted) == 0 {
		return nil, nil
	}
	res, err := s.q.Select(start, end, restricted...)
	if err != nil {
		return nil, err
	}
	// The results are built for this call, so they are changed in place.
	// The exemplar storage sorts them by series labels, and removing
	// tenantLabel keeps that order for the reason Select gives above.
	for i := range res {
		res[i].SeriesLabels = withoutTenant(res[i].SeriesLabels)
	}
	return res, nil
}
