package tsdbstore

import (
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// The metadata store stands alone: no TSDB, only its root directory.
func TestTheMetadataStoreKeepsTheLatestFamiliesUpToItsLimitAndPersistsThem(t *testing.T) {
	root := t.TempDir()
	dropped := prometheus.NewCounter(prometheus.CounterOpts{Name: "dropped"})
	ms := newMetadataStore(root, 2, slog.New(slog.DiscardHandler), dropped)
	md := func(family, help string) prompb.MetricMetadata {
		return prompb.MetricMetadata{Type: prompb.MetricMetadata_METRIC_TYPE_COUNTER, MetricFamilyName: family, Help: help}
	}
	ms.store("t", []prompb.MetricMetadata{md("a", "old"), md("b", "b")})
	ms.store("t", []prompb.MetricMetadata{md("a", "new"), md("c", "over the limit")})
	got := ms.get("t")
	if len(got) != 2 || got["a"].Help != "new" || got["b"].Help != "b" {
		t.Fatalf("metadata %v, want a (new) and b", got)
	}
	if n := testutil.ToFloat64(dropped); n != 1 {
		t.Fatalf("%v families dropped, want 1", n)
	}
	if err := ms.persist(); err != nil {
		t.Fatal(err)
	}
	again := newMetadataStore(root, 2, slog.New(slog.DiscardHandler), dropped)
	if got := again.get("t"); len(got) != 2 || got["a"].Help != "new" {
		t.Fatalf("metadata read back %v, want what was persisted", got)
	}
}
