package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/ferrylabs/ferry/consumer/lane"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/wire"
)

// call is one request sent on a stream, waiting for its answer. The
// request and its answer live in it, and its channel carries no value, so
// a request costs two allocations (a record is sent once or twice per 10
// samples at small records, where each one showed in the profile).
type call struct {
	req wire.PushRequest
	st  *stream // nil until sent
	// done is closed once resp or err is set, by the stream's receiver or
	// its failure, whichever takes the call out of the stream's pending
	// first: it is closed once.
	done chan struct{}
	resp *ferryv1.PushResponse
	err  error // the stream broke, or the request could not be sent
}

// settle sets the call's answer, or its error when resp is nil, and wakes
// its waiter. The caller took the call out of its stream's pending: no one
// else settles it.
func (c *call) settle(resp *ferryv1.PushResponse, err error) {
	c.resp, c.err = resp, err
	close(c.done)
}

// Wait returns the answer to the call, or woken when wake is ready first
// (the call keeps waiting). An error means the request's fate is unknown:
// the stream broke, or no stream was open.
func (c *call) Wait(ctx context.Context, wake <-chan struct{}) (lane.Answer, bool, error) {
	select {
	case <-c.done:
		if c.err != nil {
			return lane.Answer{}, false, c.err
		}
		return answer(c.resp), false, nil
	case <-wake:
		return lane.Answer{}, true, nil
	case <-ctx.Done():
		if c.st != nil { // nil: never sent, nothing to take back
			c.st.unregister(c.req.RequestID)
		}
		return lane.Answer{}, false, ctx.Err()
	}
}

// answer translates the pusher's response for the lanes. A status this
// version does not know is a server error: retried, never skipped.
func answer(resp *ferryv1.PushResponse) lane.Answer {
	a := lane.Answer{Reason: resp.Reason, RetryAfter: time.Duration(resp.RetryAfterMs) * time.Millisecond}
	switch resp.Status {
	case ferryv1.AckStatus_ACK_STATUS_OK:
		a.Status = lane.OK
	case ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR:
		a.Status = lane.ClientError
	default:
		a.Status = lane.ServerError
		a.Reason = fmt.Sprintf("%s: %s", resp.Status, resp.Reason)
	}
	return a
}
