package consumer

import (
	"testing"

	"github.com/ferrylabs/ferry/proto/prompb"
)

// item and decodeItem keep decode_test.go's fuzz test and benchmark
// reading as they did before records became lane.Items: they run the
// consumer's check on one record.
type item struct {
	tenant    string
	value     []byte
	partition int32
	offset    int64
	skip      *skipped
}

type skipped struct{ cause, reason string }

func (c *Consumer) decodeItem(it *item) {
	if s := c.check(it.tenant, it.value); s != nil {
		it.skip = &skipped{cause: s.Cause, reason: s.Reason}
	}
}

// TestTheCheckPassesEveryNameToThePusher: the consumer does not judge
// metric and label names, under either -limits.name-validation-scheme.
// The pusher does, series by series, storing the good series of a request
// and answering CLIENT_ERROR for the rest; skipping the whole record here
// would lose the good ones.
func TestTheCheckPassesEveryNameToThePusher(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"http.server.request.duration", "request count", "0bad", "bad\xff"} {
		wr := prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
			{Labels: []prompb.Label{{Name: "__name__", Value: name}, {Name: name, Value: "x"}}, Samples: []prompb.Sample{{Value: 1, Timestamp: 1}}},
			{Labels: []prompb.Label{{Name: "__name__", Value: "up"}}, Samples: []prompb.Sample{{Value: 1, Timestamp: 1}}},
		}}
		value, err := wr.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if skip := decodeConsumer().check("tenant-1", value); skip != nil {
			t.Errorf("a record with the name %q was skipped: %s: %s", name, skip.Cause, skip.Reason)
		}
	}
}
