package gateway

import (
	"fmt"
	"time"

	"github.com/ferrylabs/ferry/limits"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/proto/wire"
)

// validateRecord applies the consumer's check of a record value
// (wire.ValidateWriteRequest), so that nothing the gateway produces is later
// skipped by the consumer as undecodable.
func validateRecord(value []byte) error {
	return wire.ValidateWriteRequest(value)
}

// filterSeries applies the pusher's storage-free checks (label names and
// values, samples too far in the future or before 1970) to req in place,
// removing what the pusher would refuse. It returns the number of samples
// removed and the first problem, worded as the pusher words it.
func filterSeries(l limits.Limits, req *prompb.WriteRequest, now time.Time) (int64, error) {
	n, first := l.Filter(req, now)
	if first != nil {
		return n, fmt.Errorf("%d samples rejected: %w", n, first)
	}
	return n, nil
}

// formatSeries renders a series' labels for an error message.
func formatSeries(ls []prompb.Label) string {
	return limits.FormatLabels(ls)
}
