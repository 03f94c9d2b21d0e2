// Command upstreamread reads series from a remote-read endpoint with
// Prometheus' own remote-read client (storage/remote) and prints each
// series, one JSON object per line: its labels and its values (a native
// histogram's value is its count).
//
// The integration tests run it as an independent client of Ferry's
// /api/v1/read, for both response types. It is a separate program because
// it cannot be linked into them: Prometheus' prompb and Ferry's
// proto/prompb register the same protobuf names with gogo's registry,
// which panics when both are linked.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"os"
	"time"

	config_util "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage/remote"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// series is one line of output.
type series struct {
	Labels map[string]string `json:"labels"`
	Values []float64         `json:"values"`
}

func main() {
	addr := flag.String("url", "", "Remote-read URL, e.g. http://127.0.0.1:8081/api/v1/read.")
	tenant := flag.String("tenant", "", "X-Scope-OrgID header value; empty sends none.")
	match := flag.String("match", ".+", "Regular expression the metric name must match.")
	streamed := flag.Bool("streamed", true, "Accept only STREAMED_XOR_CHUNKS; false accepts only SAMPLES.")
	start := flag.Int64("start", 0, "Start of the read, in milliseconds since the epoch.")
	end := flag.Int64("end", time.Now().UnixMilli(), "End of the read, in milliseconds since the epoch.")
	flag.Parse()
	if err := run(*addr, *tenant, *match, *streamed, *start, *end); err != nil {
		fmt.Fprintln(os.Stderr, "upstreamread:", err)
		os.Exit(1)
	}
}

func run(addr, tenant, match string, streamed bool, start, end int64) error {
	u, err := url.Parse(addr)
	if err != nil {
		return fmt.Errorf("parse -url: %w", err)
	}
	accepted := []prompb.ReadRequest_ResponseType{prompb.ReadRequest_SAMPLES}
	if streamed {
		accepted = []prompb.ReadRequest_ResponseType{prompb.ReadRequest_STREAMED_XOR_CHUNKS}
	}
	conf := &remote.ClientConfig{
		URL:                   &config_util.URL{URL: u},
		Timeout:               model.Duration(time.Minute),
		ChunkedReadLimit:      50 << 20,
		AcceptedResponseTypes: accepted,
	}
	if tenant != "" {
		conf.Headers = map[string]string{"X-Scope-OrgID": tenant}
	}
	client, err := remote.NewReadClient("ferry", conf)
	if err != nil {
		return fmt.Errorf("read client: %w", err)
	}
	m, err := labels.NewMatcher(labels.MatchRegexp, model.MetricNameLabel, match)
	if err != nil {
		return fmt.Errorf("-match: %w", err)
	}
	q, err := remote.ToQuery(start, end, []*labels.Matcher{m}, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	set, err := client.Read(ctx, q, true)
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	enc := json.NewEncoder(os.Stdout)
	var it chunkenc.Iterator
	for set.Next() {
		s := series{Labels: set.At().Labels().Map(), Values: []float64{}}
		it = set.At().Iterator(it)
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			switch vt {
			case chunkenc.ValFloat:
				_, v := it.At()
				s.Values = append(s.Values, v)
			case chunkenc.ValHistogram:
				_, h := it.AtHistogram(nil)
				s.Values = append(s.Values, float64(h.Count))
			case chunkenc.ValFloatHistogram:
				_, h := it.AtFloatHistogram(nil)
				s.Values = append(s.Values, h.Count)
			}
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("series %s: %w", set.At().Labels(), err)
		}
		if err := enc.Encode(s); err != nil {
			return err
		}
	}
	return set.Err()
}
