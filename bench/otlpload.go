package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// otlpBody returns the OTLP/HTTP request carrying the same series and
// samples as the remote-write request req: one gauge per series named by
// its __name__, one data point with the series' other labels as
// attributes, and no resource attributes (so no target_info is added).
// Raw is the protobuf ExportMetricsServiceRequest, Compressed its gzip, as
// the Collector's otlphttp exporter sends by default.
func otlpBody(tenant string, req *prompb.WriteRequest) (rwBody, error) {
	md := pmetric.NewMetrics()
	ms := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics()
	ms.EnsureCapacity(len(req.Timeseries))
	for _, ts := range req.Timeseries {
		m := ms.AppendEmpty()
		dps := m.SetEmptyGauge().DataPoints()
		for _, s := range ts.Samples {
			dp := dps.AppendEmpty()
			dp.SetTimestamp(pcommon.NewTimestampFromTime(time.UnixMilli(s.Timestamp)))
			dp.SetDoubleValue(s.Value)
			dp.Attributes().EnsureCapacity(len(ts.Labels) - 1)
			for _, l := range ts.Labels {
				if l.Name == "__name__" {
					m.SetName(l.Value)
					continue
				}
				dp.Attributes().PutStr(l.Name, l.Value)
			}
		}
	}
	raw, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
	if err != nil {
		return rwBody{}, fmt.Errorf("marshal OTLP request: %w", err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(raw); err != nil {
		return rwBody{}, fmt.Errorf("gzip OTLP request: %w", err)
	}
	if err := zw.Close(); err != nil {
		return rwBody{}, fmt.Errorf("gzip OTLP request: %w", err)
	}
	return rwBody{Tenant: tenant, Raw: raw, Compressed: buf.Bytes(), Samples: md.DataPointCount(), OTLP: true}, nil
}

// otlpStatusError is the error of an OTLP answer of status other than 200:
// the status and the message of its google.rpc.Status body when it has one.
func otlpStatusError(status int, body []byte) error {
	var st spb.Status
	if err := proto.Unmarshal(body, &st); err == nil && st.GetMessage() != "" {
		return fmt.Errorf("HTTP %d: %s", status, st.GetMessage())
	}
	return fmt.Errorf("HTTP %d", status)
}

// otlpRejected returns the points an OTLP answer's partial_success says
// were rejected, and its message: a 200 that refused points must not count
// them as ingested.
func otlpRejected(body []byte) (int64, string, error) {
	if len(body) == 0 {
		return 0, "", nil
	}
	resp := pmetricotlp.NewExportResponse()
	if err := resp.UnmarshalProto(body); err != nil {
		return 0, "", fmt.Errorf("decode OTLP answer: %w", err)
	}
	ps := resp.PartialSuccess()
	return ps.RejectedDataPoints(), ps.ErrorMessage(), nil
}
