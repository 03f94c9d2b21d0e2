// Package loadgen is Ferry's one load generator: it makes deterministic
// Prometheus write requests (Shape) for tests and benchmarks, and produces
// them to Kafka at a steady rate (Producer) for ferry-loadgen and the dev
// mode.
//
// Every value is a function of (tenant, series, step), so a test can compute
// what a query must return for data it never kept in memory.
package loadgen

import (
	"fmt"
	"strconv"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// Shape describes the requests of one generator.
type Shape struct {
	// Series is the number of series in every request.
	Series int
	// StartMs is the timestamp of step 0, in milliseconds since the epoch.
	StartMs int64
	// StepMs is the distance between two steps' timestamps.
	StepMs int64
}

// Value is the sample value of a series at a step.
func Value(series, step int) float64 {
	return float64(series*1000 + step)
}

// SeriesLabels returns the labels of series s of a tenant, sorted by name.
func SeriesLabels(tenant string, s int) []prompb.Label {
	return []prompb.Label{
		{Name: "__name__", Value: "ferry_demo_value"},
		{Name: "instance", Value: "demo-" + tenant},
		{Name: "series", Value: strconv.Itoa(s)},
	}
}

// Request returns the request of a tenant at a step: one float sample per
// series, at StartMs + step*StepMs.
func (sh Shape) Request(tenant string, step int) *prompb.WriteRequest {
	ts := sh.StartMs + int64(step)*sh.StepMs
	req := &prompb.WriteRequest{Timeseries: make([]prompb.TimeSeries, sh.Series)}
	for s := range sh.Series {
		req.Timeseries[s] = prompb.TimeSeries{
			Labels:  SeriesLabels(tenant, s),
			Samples: []prompb.Sample{{Value: Value(s, step), Timestamp: ts}},
		}
	}
	return req
}

// Marshal returns the Kafka record value of a tenant's request at a step.
func (sh Shape) Marshal(tenant string, step int) []byte {
	b, err := sh.Request(tenant, step).Marshal()
	if err != nil {
		// Marshalling a well-formed in-memory message cannot fail.
		panic(fmt.Sprintf("loadgen: marshal: %v", err))
	}
	return b
}

// Tenant returns the name of tenant i.
func Tenant(i int) string {
	return fmt.Sprintf("tenant-%d", i)
}
