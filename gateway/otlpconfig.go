package gateway

import (
	"flag"
	"fmt"
	"strings"

	"github.com/prometheus/otlptranslator"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/storage/remote/otlptranslator/prometheusremotewrite"
)

// otlpExpansion bounds what an OTLP request may become once translated,
// per byte of its decompressed body: a histogram point becomes one series
// per bucket, each with all of the point's labels and the resource's job
// and instance, so a real request grows several times (a 30-bucket
// histogram with 500 bytes of attributes about 14 times); twice the
// remote-write decoder's bound leaves room for that, and a hostile request
// (target_info over centuries, a long service.name on every point) is
// refused at the bound instead of taking the gateway's memory.
const otlpExpansion = 32

// strategies are the translation strategies the translator knows, as
// Prometheus's otlp.translation_strategy names them.
var strategies = []otlptranslator.TranslationStrategyOption{
	otlptranslator.UnderscoreEscapingWithSuffixes,
	otlptranslator.UnderscoreEscapingWithoutSuffixes,
	otlptranslator.NoUTF8EscapingWithSuffixes,
	otlptranslator.NoTranslation,
}

// OTLPConfig is how OTLP metrics become Prometheus series: the settings
// of Prometheus's own OTLP receiver (its otlp: configuration block) that
// Ferry exposes, with Prometheus's defaults.
type OTLPConfig struct {
	// TranslationStrategy is how OTLP metric and attribute names become
	// Prometheus names.
	TranslationStrategy string
	// PromoteResourceAttributes are resource attributes copied to every
	// series of the resource as labels, comma-separated.
	PromoteResourceAttributes string
	// KeepIdentifyingResourceAttributes keeps service.name,
	// service.namespace and service.instance.id on target_info beside
	// job and instance.
	KeepIdentifyingResourceAttributes bool
	// ConvertHistogramsToNHCB makes classic OTLP histograms native
	// histograms with custom buckets instead of _bucket series.
	ConvertHistogramsToNHCB bool
}

// RegisterFlags registers the -gateway.otlp.* flags on f.
func (c *OTLPConfig) RegisterFlags(f *flag.FlagSet) {
	names := make([]string, len(strategies))
	for i, s := range strategies {
		names[i] = string(s)
	}
	f.StringVar(&c.TranslationStrategy, "gateway.otlp.translation-strategy", string(otlptranslator.UnderscoreEscapingWithSuffixes),
		"How OTLP metric and attribute names become Prometheus names, as Prometheus's otlp.translation_strategy: "+strings.Join(names, ", ")+
			". The default escapes to [a-zA-Z0-9_:] and adds unit and type suffixes (http.server.request.duration in seconds becomes http_server_request_duration_seconds), the names today's dashboards expect; the NoUTF8 and NoTranslation strategies keep dotted names, which the pusher stores only under UTF-8 name validation.")
	f.StringVar(&c.PromoteResourceAttributes, "gateway.otlp.promote-resource-attributes", "",
		"Resource attributes added as labels to every series of their resource, comma-separated (Prometheus's otlp.promote_resource_attributes). Empty promotes none: every resource attribute is on target_info, and service.name and service.instance.id become job and instance.")
	f.BoolVar(&c.KeepIdentifyingResourceAttributes, "gateway.otlp.keep-identifying-resource-attributes", false,
		"Keep service.name, service.namespace and service.instance.id as labels of target_info beside job and instance (Prometheus's otlp.keep_identifying_resource_attributes).")
	f.BoolVar(&c.ConvertHistogramsToNHCB, "gateway.otlp.convert-histograms-to-nhcb", false,
		"Store classic OTLP histograms as native histograms with custom buckets rather than as _bucket, _sum and _count series (Prometheus's otlp.convert_histograms_to_nhcb).")
}

// Validate reports an unknown translation strategy or an empty attribute
// in the promoted list, naming the flag.
func (c *OTLPConfig) Validate() error {
	ok := false
	for _, s := range strategies {
		ok = ok || string(s) == c.TranslationStrategy
	}
	if !ok {
		return fmt.Errorf("%w: -gateway.otlp.translation-strategy %q: want one of %v", ErrInvalidConfig, c.TranslationStrategy, strategies)
	}
	for _, a := range c.promoted() {
		if a == "" {
			return fmt.Errorf("%w: -gateway.otlp.promote-resource-attributes %q has an empty attribute name", ErrInvalidConfig, c.PromoteResourceAttributes)
		}
	}
	return nil
}

func (c *OTLPConfig) promoted() []string {
	if strings.TrimSpace(c.PromoteResourceAttributes) == "" {
		return nil
	}
	list := strings.Split(c.PromoteResourceAttributes, ",")
	for i := range list {
		list[i] = strings.TrimSpace(list[i])
	}
	return list
}

// Settings are the translator's settings for c, as Prometheus's OTLP
// handler derives them from its configuration. Delta temporality is not
// allowed, as in Prometheus by default: a delta sum or histogram is
// refused, and the answer says so.
func (c *OTLPConfig) Settings() prometheusremotewrite.Settings {
	strategy := otlptranslator.TranslationStrategyOption(c.TranslationStrategy)
	return prometheusremotewrite.Settings{
		AddMetricSuffixes:                 strategy.ShouldAddSuffixes(),
		AllowUTF8:                         !strategy.ShouldEscape(),
		PromoteResourceAttributes:         prometheusremotewrite.NewPromoteResourceAttributes(promconfig.OTLPConfig{PromoteResourceAttributes: c.promoted()}),
		KeepIdentifyingResourceAttributes: c.KeepIdentifyingResourceAttributes,
		ConvertHistogramsToNHCB:           c.ConvertHistogramsToNHCB,
	}
}
