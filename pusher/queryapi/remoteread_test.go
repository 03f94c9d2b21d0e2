package queryapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"google.golang.org/protobuf/encoding/protowire"
)

// testQuery is one query of a test ReadRequest.
type testQuery struct {
	start, end int64
	matchers   []*labels.Matcher
}

// encodeReadRequest builds a ReadRequest by its field numbers in
// Prometheus' remote.proto, independently of the server's encoder.
func encodeReadRequest(queries []testQuery, accepted ...uint64) []byte {
	var b []byte
	for _, q := range queries {
		var qb []byte
		qb = protowire.AppendTag(qb, 1, protowire.VarintType)
		qb = protowire.AppendVarint(qb, uint64(q.start))
		qb = protowire.AppendTag(qb, 2, protowire.VarintType)
		qb = protowire.AppendVarint(qb, uint64(q.end))
		for _, m := range q.matchers {
			var mb []byte
			mb = protowire.AppendTag(mb, 1, protowire.VarintType)
			mb = protowire.AppendVarint(mb, uint64(m.Type))
			mb = protowire.AppendTag(mb, 2, protowire.BytesType)
			mb = protowire.AppendString(mb, m.Name)
			mb = protowire.AppendTag(mb, 3, protowire.BytesType)
			mb = protowire.AppendString(mb, m.Value)
			qb = protowire.AppendTag(qb, 3, protowire.BytesType)
			qb = protowire.AppendBytes(qb, mb)
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, qb)
	}
	if len(accepted) > 0 {
		var packed []byte
		for _, a := range accepted {
			packed = protowire.AppendVarint(packed, a)
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, packed)
	}
	return b
}

// remoteRead posts a ReadRequest as tenant and returns the answer.
func (e *testEnv) remoteRead(t *testing.T, tenant string, body []byte) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/api/v1/read", bytes.NewReader(snappy.Encode(nil, body)))
	if err != nil {
		t.Fatal(err)
	}
	if tenant != "" {
		req.Header.Set(TenantHeader, tenant)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading answer: %v", err)
	}
	return resp, data
}

// readSeries is a series of a read answer: its labels and its samples as
// "t=v" strings, floats and histogram counts alike.
type readSeries map[string][]float64

// decodeSamplesResponse decodes a SAMPLES answer into one readSeries per
// query, through Prometheus' generated ReadResponse.
func decodeSamplesResponse(t *testing.T, body []byte) []readSeries {
	t.Helper()
	raw, err := snappy.Decode(nil, body)
	if err != nil {
		t.Fatal(err)
	}
	var resp prompb.ReadResponse
	if err := resp.Unmarshal(raw); err != nil {
		t.Fatal(err)
	}
	var out []readSeries
	for _, res := range resp.Results {
		rs := readSeries{}
		out = append(out, rs)
		for _, ts := range res.Timeseries {
			key := labelsKey(ts.Labels)
			for _, s := range ts.Samples {
				rs[key] = append(rs[key], s.Value)
			}
			for _, h := range ts.Histograms {
				rs[key] = append(rs[key], float64(h.GetCountInt())+h.GetCountFloat())
			}
		}
	}
	return out
}

func labelsKey(ls []prompb.Label) string {
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(l.Name + "=" + l.Value + ",")
	}
	return b.String()
}

// decodeStreamedResponse decodes the frames of a STREAMED_XOR_CHUNKS
// answer, checking each frame's CRC, into one readSeries per query index.
func decodeStreamedResponse(t *testing.T, body []byte) map[int64]readSeries {
	t.Helper()
	out := map[int64]readSeries{}
	r := bufio.NewReader(bytes.NewReader(body))
	for {
		n, err := binary.ReadUvarint(r)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var crc [4]byte
		if _, err := io.ReadFull(r, crc[:]); err != nil {
			t.Fatal(err)
		}
		data := make([]byte, n)
		if _, err := io.ReadFull(r, data); err != nil {
			t.Fatal(err)
		}
		if crc32.Checksum(data, castagnoli) != binary.BigEndian.Uint32(crc[:]) {
			t.Fatal("frame CRC mismatch")
		}
		var frame prompb.ChunkedReadResponse
		if err := frame.Unmarshal(data); err != nil {
			t.Fatal(err)
		}
		if out[frame.QueryIndex] == nil {
			out[frame.QueryIndex] = readSeries{}
		}
		for _, cs := range frame.ChunkedSeries {
			key := labelsKey(cs.Labels)
			for _, pc := range cs.Chunks {
				c, err := chunkenc.FromData(chunkenc.Encoding(pc.Type), pc.Data)
				if err != nil {
					t.Fatal(err)
				}
				it := c.Iterator(nil)
				for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
					switch vt {
					case chunkenc.ValFloat:
						_, v := it.At()
						out[frame.QueryIndex][key] = append(out[frame.QueryIndex][key], v)
					case chunkenc.ValHistogram:
						_, h := it.AtHistogram(nil)
						out[frame.QueryIndex][key] = append(out[frame.QueryIndex][key], float64(h.Count))
					}
				}
				if err := it.Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

func allTime(ms ...*labels.Matcher) testQuery {
	return testQuery{start: math.MinInt64, end: math.MaxInt64, matchers: ms}
}

func TestRemoteRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testConfig())
	i1 := `__name__=ferry_test_metric,instance=i1,job=a,`
	i2 := `__name__=ferry_test_metric,instance=i2,job=a,`
	hist := `__name__=ferry_test_hist,env=prod,`
	var i1Values, i2Values []float64
	for i := range samples {
		i1Values = append(i1Values, i1Value(i))
		i2Values = append(i2Values, i2Value(i))
	}
	queries := []testQuery{
		allTime(labels.MustNewMatcher(labels.MatchEqual, "__name__", "ferry_test_metric")),
		{start: sampleTime(10), end: sampleTime(12), matchers: []*labels.Matcher{
			labels.MustNewMatcher(labels.MatchRegexp, "__name__", "ferry_test_.*"),
			labels.MustNewMatcher(labels.MatchNotEqual, "instance", "i2"),
		}},
		allTime(labels.MustNewMatcher(labels.MatchEqual, "__name__", "ferry_test_hist")),
	}
	want := []readSeries{
		{i1: i1Values, i2: i2Values},
		{i1: {10, 11, 12}},
		{hist: {5}},
	}
	check := func(t *testing.T, got map[int64]readSeries) {
		t.Helper()
		for i, w := range want {
			if len(got[int64(i)]) != len(w) {
				t.Errorf("query %d: %d series, want %d: %v", i, len(got[int64(i)]), len(w), got[int64(i)])
			}
			for s, vals := range w {
				if g := got[int64(i)][s]; !equalFloats(g, vals) {
					t.Errorf("query %d series %s: %v, want %v", i, s, g, vals)
				}
			}
		}
	}
	t.Run("the SAMPLES response holds every sample of every query", func(t *testing.T) {
		t.Parallel()
		// No accepted type at all is how older clients ask for SAMPLES.
		for _, accepted := range [][]uint64{nil, {uint64(prompb.ReadRequest_SAMPLES)}} {
			resp, body := e.remoteRead(t, "alpha", encodeReadRequest(queries, accepted...))
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "snappy" {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			got := map[int64]readSeries{}
			for i, rs := range decodeSamplesResponse(t, body) {
				got[int64(i)] = rs
			}
			check(t, got)
		}
	})
	t.Run("the streamed response holds the same samples in chunks", func(t *testing.T) {
		t.Parallel()
		resp, body := e.remoteRead(t, "alpha", encodeReadRequest(queries, uint64(prompb.ReadRequest_STREAMED_XOR_CHUNKS), uint64(prompb.ReadRequest_SAMPLES)))
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-streamed-protobuf") {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		check(t, decodeStreamedResponse(t, body))
	})
	t.Run("another tenant reads only its own series", func(t *testing.T) {
		t.Parallel()
		_, body := e.remoteRead(t, "beta", encodeReadRequest([]testQuery{allTime(labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"))}))
		got := decodeSamplesResponse(t, body)
		if len(got) != 1 || len(got[0]) != 1 || len(got[0][`__name__=beta_only,team=b,`]) != 1 {
			t.Errorf("beta read %v", got)
		}
	})
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRemoteReadErrors(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.MaxSamples = 100
	e := newEnv(t, cfg)
	everything := []testQuery{allTime(labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"))}
	for _, tc := range []struct {
		name   string
		tenant string
		body   []byte
		raw    bool // send body without snappy
		code   int
		msg    string
	}{
		{"a SAMPLES read over -query.max-samples is refused", "alpha", encodeReadRequest(everything), false, http.StatusBadRequest, "exceeded sample limit (100)"},
		{"a streamed read over -query.max-samples in its first series is refused", "alpha", encodeReadRequest([]testQuery{allTime(labels.MustNewMatcher(labels.MatchEqual, "__name__", "ferry_test_metric"))}, uint64(prompb.ReadRequest_STREAMED_XOR_CHUNKS)), false, http.StatusBadRequest, "exceeded sample limit (100)"},
		{"a read without tenant is unauthorized", "", encodeReadRequest(everything), false, http.StatusUnauthorized, "missing X-Scope-OrgID"},
		{"an unknown response type is refused", "alpha", encodeReadRequest(everything, 7), false, http.StatusBadRequest, "does not support"},
		{"a body that is not snappy is refused", "alpha", []byte("not snappy at all"), true, http.StatusBadRequest, "snappy"},
		{"a body that is not a ReadRequest is refused", "alpha", []byte{0x0a, 0xff}, false, http.StatusBadRequest, "decoding ReadRequest"},
		{"a bad regular expression is refused", "alpha", encodeReadRequest([]testQuery{allTime(&labels.Matcher{Type: labels.MatchRegexp, Name: "x", Value: "("})}), false, http.StatusBadRequest, "matcher"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var resp *http.Response
			var answer []byte
			if tc.raw {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/api/v1/read", bytes.NewReader(tc.body))
				req.Header.Set(TenantHeader, tc.tenant)
				r, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Body.Close()
				resp = r
				answer, _ = io.ReadAll(r.Body)
			} else {
				resp, answer = e.remoteRead(t, tc.tenant, tc.body)
			}
			if resp.StatusCode != tc.code || !strings.Contains(string(answer), tc.msg) {
				t.Errorf("%d %q, want %d containing %q", resp.StatusCode, answer, tc.code, tc.msg)
			}
		})
	}
}

func TestStreamedReadOverTheLimit(t *testing.T) {
	t.Parallel()
	// ferry_test_hist (one sample) sorts first and makes a frame;
	// ferry_test_metric then exceeds the limit.
	body := encodeReadRequest([]testQuery{allTime(labels.MustNewMatcher(labels.MatchRegexp, "__name__", "ferry_test_.*"))}, uint64(prompb.ReadRequest_STREAMED_XOR_CHUNKS))
	for _, tc := range []struct {
		name       string
		streamHold int
		wantBroken bool
	}{
		{"a read failing within the held-back bytes gets a plain 400", maxBytesInFrame, false},
		// The protocol has no error frame, so once frames are out the
		// client must see a broken stream, not one that looks complete.
		{"a read failing after frames were sent breaks the stream", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.MaxSamples = 100
			e := newEnv(t, cfg)
			e.api.streamHold = tc.streamHold
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+"/api/v1/read", bytes.NewReader(snappy.Encode(nil, body)))
			req.Header.Set(TenantHeader, "alpha")
			resp, err := http.DefaultClient.Do(req)
			var answer []byte
			if err == nil {
				defer resp.Body.Close()
				answer, err = io.ReadAll(resp.Body)
			}
			if tc.wantBroken {
				if err == nil {
					t.Fatalf("the stream ended cleanly (%d) although the read exceeded the sample limit", resp.StatusCode)
				}
				return
			}
			if err != nil || resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(answer), "exceeded sample limit (100)") {
				t.Fatalf("%v: %v %q", err, resp, answer)
			}
		})
	}
}

func TestRemoteReadWaitsForAQuerySlot(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.MaxConcurrency = 1
	cfg.Timeout = 200 * time.Millisecond
	e := newEnv(t, cfg)
	if _, err := e.api.slots.Insert(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	body := encodeReadRequest([]testQuery{allTime(labels.MustNewMatcher(labels.MatchEqual, "__name__", "beta_only"))})
	resp, answer := e.remoteRead(t, "beta", body)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("with every slot taken: %d %s, want 503", resp.StatusCode, answer)
	}
	e.api.slots.Delete(0)
	if resp, answer := e.remoteRead(t, "beta", body); resp.StatusCode != http.StatusOK {
		t.Errorf("with a free slot: %d %s", resp.StatusCode, answer)
	}
}

func FuzzDecodeReadRequest(f *testing.F) {
	f.Add(encodeReadRequest([]testQuery{allTime(labels.MustNewMatcher(labels.MatchRegexp, "__name__", "a.*"))}, 0, 1))
	f.Add([]byte{0x0a, 0x02, 0x22, 0x00})
	f.Add([]byte{0x12, 0x01, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeReadRequest(b, (&Config{MaxExpressionBytes: 256 << 10, MaxExpressionTokens: 10_000, MaxExpressionDepth: 128}).exprLimits())
		if err == nil && req == nil {
			t.Fatal("nil request without error")
		}
	})
}
