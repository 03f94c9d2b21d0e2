package pusher

import (
	"time"

	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// Filter applies the storage-free checks (limits.Limits.Filter, the same
// function the gateway calls) to req in place and answers the first
// problem found as a ClientError, with the number of samples removed.
func (l Limits) Filter(req *prompb.WriteRequest, now time.Time) (rejected int64, first *backend.ClientError) {
	rejected, v := l.Limits.Filter(req, now)
	if v != nil {
		first = &backend.ClientError{Reason: v.Reason, Cause: v}
	}
	return rejected, first
}
