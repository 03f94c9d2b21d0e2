// Package limits holds the rules every door of Ferry applies to data
// without looking at stored state: label rules, sample time bounds, native
// histogram consistency, exemplar and metadata rules, the bounds on a
// request's size once decoded, and the flags that set them. The gateway
// (HTTP) and the pusher (gRPC) both call Limits.Filter, so that what the
// gateway answers 2xx is never refused later by the pusher for a reason it
// could have seen itself.
//
// It is a leaf: it imports the remote-write types (proto/prompb), the
// hand-written codec that applies the label rules while it reads
// (proto/wire), and Prometheus' model packages; never gRPC, never the
// gateway or the pusher. It is not part of proto/wire because wire is
// about reading and writing bytes; these are policies with flags.
package limits

import (
	"flag"
	"fmt"
	"time"

	"github.com/prometheus/common/model"

	"github.com/ferrylabs/ferry/proto/wire"
)

// Limits are the checks that need no storage, applied to every request at
// every door.
type Limits struct {
	MaxLabelsPerSeries  int
	MaxLabelNameLength  int
	MaxLabelValueLength int
	// CreationGracePeriod is how far in the future a sample may be.
	CreationGracePeriod time.Duration
	// PastGracePeriod is how far in the past a sample may be; 0 accepts
	// any timestamp from 1970 on.
	PastGracePeriod time.Duration

	// MaxSeriesPerRequest and MaxSamplesPerSeries bound a request before
	// it is decoded (wire.Limits): over them the whole request is a
	// client error.
	MaxSeriesPerRequest int
	MaxSamplesPerSeries int

	// MaxMetadataLength is the longest metric family name, help text and
	// unit of one metadata entry, in bytes. The pusher keeps the latest
	// metadata of every family of a tenant in memory, so a help text
	// without a bound is memory without a bound (issue 31, finding 7).
	MaxMetadataLength int
	// MaxMetadataBytesPerRequest bounds the bytes of a request's metadata
	// entries (family names, help texts and units) together; the entries
	// past it are refused.
	MaxMetadataBytesPerRequest int

	// NameValidation is the rule for metric and label names
	// (-limits.name-validation-scheme): model.UTF8Validation, any
	// non-empty valid UTF-8, as Prometheus 3 accepts by default, or
	// model.LegacyValidation, [a-zA-Z_:][a-zA-Z0-9_:]* for metric names
	// and [a-zA-Z_][a-zA-Z0-9_]* for label names. The zero value
	// (model.UnsetValidation) is UTF-8, as the flag's default is.
	NameValidation model.ValidationScheme
}

// DefaultPastGracePeriod is -limits.past-grace-period's default, ten years:
// far beyond any retention, near enough to refuse timestamps of 1970.
const DefaultPastGracePeriod = 10 * 365 * 24 * time.Hour

// RegisterFlags registers the limits' flags on f.
func (l *Limits) RegisterFlags(f *flag.FlagSet) {
	f.IntVar(&l.MaxLabelsPerSeries, "limits.max-labels-per-series", 30, "Most labels a series may have, its name included.")
	f.IntVar(&l.MaxLabelNameLength, "limits.max-label-name-length", 1024, "Longest label name, in bytes.")
	f.IntVar(&l.MaxLabelValueLength, "limits.max-label-value-length", 2048, "Longest label value, in bytes.")
	f.DurationVar(&l.CreationGracePeriod, "limits.creation-grace-period", 10*time.Minute, "How far in the future a sample's timestamp may be.")
	f.DurationVar(&l.PastGracePeriod, "limits.past-grace-period", DefaultPastGracePeriod, "How far in the past a sample's timestamp may be; older samples are answered CLIENT_ERROR instead of creating blocks of a long-gone time. 0 accepts any timestamp from 1970 on.")
	f.IntVar(&l.MaxSeriesPerRequest, "limits.max-series-per-request", 20_000, "Most series one request may have; a larger request is answered CLIENT_ERROR before it is decoded.")
	f.IntVar(&l.MaxSamplesPerSeries, "limits.max-samples-per-series", 20_000, "Most samples one series of a request may have, and separately the most histograms and exemplars; a request over it is answered CLIENT_ERROR.")
	f.IntVar(&l.MaxMetadataLength, "limits.max-metadata-length", 1024, "Longest metric family name, help text and unit of a metadata entry, in bytes; a longer entry is refused (CLIENT_ERROR, 400 at the gateway).")
	l.NameValidation = model.UTF8Validation
	f.Var(&l.NameValidation, "limits.name-validation-scheme", "Rule for metric and label names: utf8 (any non-empty valid UTF-8) or legacy (the classic names: ASCII letters, digits and '_', and ':' in metric names, not starting with a digit). A series that breaks it is refused, naming the rule (CLIENT_ERROR, 400 at the gateway). utf8 by default, as Prometheus 3: OpenTelemetry names such as http.server.request.duration arrive that way, PromQL selects them quoted ({\"http.server.request.duration\", \"service.name\"=\"api\"}), and classic names are a subset, so existing queries and dashboards keep working. legacy keeps out names that a TSDB or tool behind Ferry that only knows classic names would refuse. Invalid UTF-8 is refused under both. The gateway and the pusher apply it; the consumer passes names to the pusher, which answers them.")
	f.IntVar(&l.MaxMetadataBytesPerRequest, "limits.max-metadata-bytes-per-request", 1<<20, "Most bytes of metadata (family names, help texts and units) in one request; the entries past it are refused (CLIENT_ERROR, 400 at the gateway).")
}

// Validate reports the first invalid limit, naming its flag. The callers
// wrap it in their own ErrInvalidConfig.
func (l Limits) Validate() error {
	for _, v := range []struct {
		flag  string
		value int
	}{
		{"-limits.max-labels-per-series", l.MaxLabelsPerSeries},
		{"-limits.max-label-name-length", l.MaxLabelNameLength},
		{"-limits.max-label-value-length", l.MaxLabelValueLength},
		{"-limits.max-series-per-request", l.MaxSeriesPerRequest},
		{"-limits.max-samples-per-series", l.MaxSamplesPerSeries},
		{"-limits.max-metadata-length", l.MaxMetadataLength},
		{"-limits.max-metadata-bytes-per-request", l.MaxMetadataBytesPerRequest},
	} {
		if v.value <= 0 {
			return fmt.Errorf("%s must be positive, got %d", v.flag, v.value)
		}
	}
	if l.CreationGracePeriod < 0 {
		return fmt.Errorf("-limits.creation-grace-period must not be negative, got %s", l.CreationGracePeriod)
	}
	if l.PastGracePeriod < 0 {
		return fmt.Errorf("-limits.past-grace-period must not be negative, got %s", l.PastGracePeriod)
	}
	switch l.NameValidation {
	case model.UnsetValidation, model.UTF8Validation, model.LegacyValidation:
	default:
		// Its String panics on a value it does not know.
		return fmt.Errorf("-limits.name-validation-scheme must be utf8 or legacy, got %d", int(l.NameValidation))
	}
	return nil
}

// NameScheme is the rule for metric and label names: NameValidation, with its
// zero value read as UTF-8, the flag's default.
func (l Limits) NameScheme() model.ValidationScheme {
	if l.NameValidation == model.LegacyValidation {
		return model.LegacyValidation
	}
	return model.UTF8Validation
}

// Wire returns the bounds the decoders apply while decoding: the series
// and samples limits, and the one bound on decoded memory per input byte
// (wire.DefaultMaxExpansion) that every decoder of every door respects.
func (l Limits) Wire() wire.Limits {
	return wire.Limits{MaxSeries: l.MaxSeriesPerRequest, MaxSamplesPerSeries: l.MaxSamplesPerSeries, MaxExpansion: wire.DefaultMaxExpansion}
}

// TimeBounds are the earliest and latest timestamps, in milliseconds, that
// Filter keeps at now.
func (l Limits) TimeBounds(now time.Time) (minTs, maxTs int64) {
	maxTs = now.Add(l.CreationGracePeriod).UnixMilli()
	minTs = 0 // before 1970 is never valid
	if l.PastGracePeriod > 0 {
		minTs = max(minTs, now.Add(-l.PastGracePeriod).UnixMilli())
	}
	return minTs, maxTs
}

// LabelRules are Filter's label checks, for wire.Decoder.Scan: a request
// that Scan accepts with them, and whose timestamps are within TimeBounds,
// is one Filter leaves as it is and finds nothing wrong with.
func (l Limits) LabelRules() wire.LabelRules {
	return wire.LabelRules{
		MaxLabelsPerSeries:  l.MaxLabelsPerSeries,
		MaxLabelNameLength:  l.MaxLabelNameLength,
		MaxLabelValueLength: l.MaxLabelValueLength,
		NameValidation:      l.NameScheme(),
	}
}
