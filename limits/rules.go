package limits

import (
	"fmt"
	"unicode/utf8"

	"github.com/prometheus/prometheus/model/exemplar"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// filterExemplars drops the exemplars of ts that the TSDB's exemplar
// storage refuses whatever it holds, and names the rule of the first:
//
//   - an exemplar on a series without a sample or histogram in the same
//     request: the TSDB attaches exemplars to a series of its head, and a
//     series that only exemplars name may have none (then storage.ErrNotFound);
//     whether it has one is stored state, so the rule asks for a sample
//     beside every exemplar, as every remote-write client sends them;
//   - labels of more than exemplar.ExemplarMaxLabelSetLength (128) runes,
//     names and values together (OpenMetrics' limit, storage.ErrExemplarLabelLength);
//   - a label name twice (tsdb.ErrInvalidExemplar).
func filterExemplars(ts *prompb.TimeSeries) (dropped int64, rule, reason string) {
	if len(ts.Exemplars) == 0 {
		return 0, "", ""
	}
	if len(ts.Samples) == 0 && len(ts.Histograms) == 0 {
		n := int64(len(ts.Exemplars))
		ts.Exemplars = ts.Exemplars[:0]
		return n, RuleExemplarNoSample, "exemplar on a series without samples in the request"
	}
	ts.Exemplars = filterSlice(ts.Exemplars, func(e prompb.Exemplar) bool {
		r, why := exemplarLabelsRule(e.Labels)
		if why == "" {
			return false
		}
		if reason == "" {
			rule, reason = r, why
		}
		dropped++
		return true
	})
	return dropped, rule, reason
}

// exemplarLabelsRule says which rule an exemplar's labels break, as the
// TSDB's exemplar storage judges the labels the pusher gives it (those
// with a value): a name twice (tsdb.ErrInvalidExemplar), or more than
// exemplar.ExemplarMaxLabelSetLength runes of names and values together.
func exemplarLabelsRule(ls []prompb.Label) (rule, reason string) {
	n := 0
	for i, l := range ls {
		if l.Value == "" {
			continue
		}
		for _, prev := range ls[:i] {
			if prev.Value != "" && prev.Name == l.Name {
				return RuleExemplarLabels, fmt.Sprintf("exemplar label name %q twice", truncate(l.Name))
			}
		}
		n += utf8.RuneCountInString(l.Name) + utf8.RuneCountInString(l.Value)
	}
	if n > exemplar.ExemplarMaxLabelSetLength {
		return RuleExemplarLabelsLen, fmt.Sprintf("exemplar labels of %d runes, more than the limit of %d", n, exemplar.ExemplarMaxLabelSetLength)
	}
	return "", ""
}

// filterMetadata drops the metadata entries of req that break a rule, and
// says why for the first: an entry without a metric family name (the
// pusher has nothing to file it under and would skip it) or with one the
// name validation scheme refuses for a series, a family name,
// help text or unit longer than MaxMetadataLength, or an entry past
// MaxMetadataBytesPerRequest bytes of the request's metadata. Metadata
// lives as long as its tenant in the pusher's memory, so its bytes are
// bounded like a series' labels.
func (l Limits) filterMetadata(req *prompb.WriteRequest) (reason string) {
	if len(req.Metadata) == 0 {
		return ""
	}
	total := 0
	scheme := l.NameScheme()
	kept := req.Metadata[:0]
	for _, md := range req.Metadata {
		why := ""
		size := len(md.MetricFamilyName) + len(md.Help) + len(md.Unit)
		switch {
		case md.MetricFamilyName == "":
			why = "metadata without a metric family name"
		case !validMetricName(scheme, md.MetricFamilyName):
			// It names no series the rule lets in.
			why = fmt.Sprintf("metadata of an invalid metric family name %q%s", truncate(md.MetricFamilyName), nameRule(scheme, md.MetricFamilyName, true))
		case max(len(md.MetricFamilyName), len(md.Help), len(md.Unit)) > l.MaxMetadataLength:
			why = fmt.Sprintf("metadata of %q: family name, help or unit longer than the limit of %d bytes (-limits.max-metadata-length)", truncate(md.MetricFamilyName), l.MaxMetadataLength)
		case total+size > l.MaxMetadataBytesPerRequest:
			why = fmt.Sprintf("metadata of %q: the request's metadata is over the limit of %d bytes (-limits.max-metadata-bytes-per-request)", truncate(md.MetricFamilyName), l.MaxMetadataBytesPerRequest)
		}
		if why != "" {
			if reason == "" {
				reason = why
			}
			continue
		}
		total += size
		kept = append(kept, md)
	}
	clear(req.Metadata[len(kept):])
	req.Metadata = kept
	if len(kept) == 0 {
		req.Metadata = nil
	}
	return reason
}
