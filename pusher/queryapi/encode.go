package queryapi

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
)

// The encoder below writes Prometheus' JSON by hand instead of through
// encoding/json: a range query result can hold millions of points, and
// reflection over them would dominate the request. It follows the byte
// layout of Prometheus' own jsoniter codec (web/api/v1/json_codec.go) so
// that responses are indistinguishable from a Prometheus server's.

// queryData is the "data" of a query or query_range response.
type queryData struct {
	value parser.Value
}

// buildInfo is the "data" of /api/v1/status/buildinfo.
type buildInfo struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	Branch    string `json:"branch"`
	BuildUser string `json:"buildUser"`
	BuildDate string `json:"buildDate"`
	GoVersion string `json:"goVersion"`
}

// appendSuccess appends a complete success response.
func appendSuccess(b []byte, data any, warnings, infos []string) ([]byte, error) {
	b = append(b, `{"status":"success","data":`...)
	var err error
	if b, err = appendData(b, data); err != nil {
		return nil, err
	}
	if len(warnings) > 0 {
		b = append(b, `,"warnings":`...)
		b = appendStrings(b, warnings)
	}
	if len(infos) > 0 {
		b = append(b, `,"infos":`...)
		b = appendStrings(b, infos)
	}
	return append(b, '}'), nil
}

// appendError appends a complete error response.
func appendError(b []byte, e *apiError) []byte {
	b = append(b, `{"status":"error","errorType":`...)
	b = appendString(b, string(e.typ))
	b = append(b, `,"error":`...)
	b = appendString(b, e.err.Error())
	return append(b, '}')
}

func appendData(b []byte, data any) ([]byte, error) {
	switch d := data.(type) {
	case queryData:
		b = append(b, `{"resultType":`...)
		b = appendString(b, string(d.value.Type()))
		b = append(b, `,"result":`...)
		var err error
		if b, err = appendValue(b, d.value); err != nil {
			return nil, err
		}
		return append(b, '}'), nil
	case []labels.Labels:
		b = append(b, '[')
		for i, ls := range d {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendLabels(b, ls)
		}
		return append(b, ']'), nil
	case []string:
		return appendStrings(b, d), nil
	case []exemplar.QueryResult:
		return appendExemplars(b, d), nil
	default:
		// Small, rare payloads such as build info.
		j, err := json.Marshal(d)
		if err != nil {
			return nil, err
		}
		return append(b, j...), nil
	}
}

func appendValue(b []byte, v parser.Value) ([]byte, error) {
	switch v := v.(type) {
	case promql.Vector:
		b = append(b, '[')
		for i, s := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendSample(b, s)
		}
		return append(b, ']'), nil
	case promql.Matrix:
		b = append(b, '[')
		for i, s := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendSeries(b, s)
		}
		return append(b, ']'), nil
	case promql.Scalar:
		// Prometheus renders scalars through promql.Scalar.MarshalJSON,
		// which always uses plain decimal notation.
		b = append(b, '[')
		b = appendUnixSeconds(b, v.T)
		b = append(b, ',', '"')
		b = strconv.AppendFloat(b, v.V, 'f', -1, 64)
		return append(b, '"', ']'), nil
	case promql.String:
		b = append(b, '[')
		b = appendUnixSeconds(b, v.T)
		b = append(b, ',')
		b = appendString(b, v.V)
		return append(b, ']'), nil
	default:
		return nil, fmt.Errorf("cannot encode a query result of type %T", v)
	}
}

// appendSample writes {"metric":{...},"value":[t,"v"]}, or "histogram"
// in place of "value" for a native histogram sample.
func appendSample(b []byte, s promql.Sample) []byte {
	b = append(b, `{"metric":`...)
	b = appendLabels(b, s.Metric)
	if s.H == nil {
		b = append(b, `,"value":[`...)
		b = appendTimestamp(b, s.T)
		b = append(b, ',')
		b = appendFloat(b, s.F)
	} else {
		b = append(b, `,"histogram":[`...)
		b = appendTimestamp(b, s.T)
		b = append(b, ',')
		b = appendHistogram(b, s.H)
	}
	return append(b, ']', '}')
}

// appendSeries writes {"metric":{...},"values":[...],"histograms":[...]},
// leaving out whichever of the two lists is empty.
func appendSeries(b []byte, s promql.Series) []byte {
	b = append(b, `{"metric":`...)
	b = appendLabels(b, s.Metric)
	if len(s.Floats) > 0 {
		b = append(b, `,"values":[`...)
		for i, p := range s.Floats {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '[')
			b = appendTimestamp(b, p.T)
			b = append(b, ',')
			b = appendFloat(b, p.F)
			b = append(b, ']')
		}
		b = append(b, ']')
	}
	if len(s.Histograms) > 0 {
		b = append(b, `,"histograms":[`...)
		for i, p := range s.Histograms {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '[')
			b = appendTimestamp(b, p.T)
			b = append(b, ',')
			b = appendHistogram(b, p.H)
			b = append(b, ']')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendHistogram writes {"count":"c","sum":"s","buckets":[[k,"lo","hi","n"],...]}.
// k encodes which bounds are inclusive: 0 upper only, 1 lower only, 2
// neither, 3 both. Empty buckets are left out, as Prometheus does, since
// sparse exponential histograms would otherwise list many zeros.
func appendHistogram(b []byte, h *histogram.FloatHistogram) []byte {
	b = append(b, `{"count":`...)
	b = appendFloat(b, h.Count)
	b = append(b, `,"sum":`...)
	b = appendFloat(b, h.Sum)
	first := true
	it := h.AllBucketIterator()
	for it.Next() {
		bucket := it.At()
		if bucket.Count == 0 {
			continue
		}
		if first {
			b = append(b, `,"buckets":[`...)
			first = false
		} else {
			b = append(b, ',')
		}
		kind := 2
		switch {
		case bucket.LowerInclusive && bucket.UpperInclusive:
			kind = 3
		case bucket.LowerInclusive:
			kind = 1
		case bucket.UpperInclusive:
			kind = 0
		}
		b = append(b, '[')
		b = strconv.AppendInt(b, int64(kind), 10)
		b = append(b, ',')
		b = appendFloat(b, bucket.Lower)
		b = append(b, ',')
		b = appendFloat(b, bucket.Upper)
		b = append(b, ',')
		b = appendFloat(b, bucket.Count)
		b = append(b, ']')
	}
	if !first {
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendTimestamp writes milliseconds t as unix seconds with up to three
// decimals, padding the fraction to three digits as Prometheus does
// (1.050, not 1.05), without going through a float that could round.
func appendTimestamp(b []byte, t int64) []byte {
	if t < 0 {
		b = append(b, '-')
		t = -t
	}
	b = strconv.AppendInt(b, t/1000, 10)
	if frac := t % 1000; frac != 0 {
		b = append(b, '.')
		if frac < 100 {
			b = append(b, '0')
		}
		if frac < 10 {
			b = append(b, '0')
		}
		b = strconv.AppendInt(b, frac, 10)
	}
	return b
}

// appendUnixSeconds writes milliseconds t as encoding/json writes the
// float t/1000: the form Prometheus uses for scalar and string results.
func appendUnixSeconds(b []byte, t int64) []byte {
	j, _ := json.Marshal(float64(t) / 1000) // A finite float cannot fail.
	return append(b, j...)
}

// appendFloat writes a sample value as a JSON string, which is how
// Prometheus carries NaN and ±Inf that JSON numbers cannot express:
// "NaN", "+Inf", "-Inf". Like Prometheus, it switches to exponent notation
// for magnitudes below 1e-6 or from 1e21 up, where decimal notation would
// be unreadably long.
func appendFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = append(b, '"')
	b = strconv.AppendFloat(b, f, format, -1, 64)
	return append(b, '"')
}

// appendLabels writes a label set as a JSON object. Labels are kept sorted
// by name, so the keys come out sorted.
func appendLabels(b []byte, ls labels.Labels) []byte {
	b = append(b, '{')
	first := true
	ls.Range(func(l labels.Label) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendString(b, l.Name)
		b = append(b, ':')
		b = appendString(b, l.Value)
	})
	return append(b, '}')
}

func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendString writes s as a JSON string. Most label names and values are
// plain ASCII and are copied directly; anything else goes through
// encoding/json so that escaping (including of <, > and & and of invalid
// UTF-8) is exactly the standard library's.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			j, _ := json.Marshal(s) // Marshaling a string cannot fail.
			return append(b, j...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
