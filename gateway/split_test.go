package gateway

import (
	"testing"

	"github.com/ferrylabs/ferry/proto/prompb"
)

func TestSplitKeepsEverySeriesAndMetadataOnceInOrder(t *testing.T) {
	t.Parallel()
	req := v1Request(100)
	for i := range 20 {
		req.Metadata = append(req.Metadata, prompb.MetricMetadata{MetricFamilyName: "m" + string(rune('a'+i)), Help: "some help text"})
	}
	for _, max := range []int{req.Size(), 2048, 1024} {
		values, err := split(req, max)
		if err != nil {
			t.Fatalf("max %d: %v", max, err)
		}
		var series, md int
		for _, v := range values {
			if len(v) > max {
				t.Errorf("max %d: record of %d bytes", max, len(v))
			}
			var got prompb.WriteRequest
			if err := got.Unmarshal(v); err != nil {
				t.Fatal(err)
			}
			for _, ts := range got.Timeseries {
				if ts.Samples[0].Value != float64(series) {
					t.Fatalf("max %d: series %d out of order", max, series)
				}
				series++
			}
			md += len(got.Metadata)
		}
		if series != 100 || md != 20 {
			t.Errorf("max %d: %d series and %d metadata across %d records, want 100 and 20", max, series, md, len(values))
		}
	}
}

func TestSplitRefusesASeriesLargerThanARecord(t *testing.T) {
	t.Parallel()
	if _, err := split(v1Request(1500), 1024); err == nil {
		t.Fatal("split of a 1.5 kB series into 1 kB records succeeded")
	}
}
