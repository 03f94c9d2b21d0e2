package pusher

import (
	"fmt"
	"time"

	"github.com/ferrylabs/ferry/internal/logging"
	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// answered is a request's answer before it is counted and logged (settle).
type answered struct {
	resp *ferryv1.PushResponse
	err  error // what resp says, for the log
	// took is the time applying it took; applied is set when it was
	// applied (or tried), not refused unseen.
	took    time.Duration
	applied bool
}

// answer turns a request's outcome into its acknowledgement.
func (a *applier) answer(req *ferryv1.PushRequest, res backend.Result, err error) *ferryv1.PushResponse {
	class, retryAfter := backend.Classify(err)
	resp := &ferryv1.PushResponse{
		RequestId:       req.RequestId,
		Status:          ackStatus(class),
		AcceptedSamples: res.Accepted,
		RejectedSamples: res.Rejected,
		RetryAfterMs:    retryAfter.Milliseconds(),
	}
	if err != nil {
		resp.Reason = err.Error()
		if class == backend.ClassClient {
			resp.Reason = fmt.Sprintf("%s (%d accepted, %d rejected)", resp.Reason, res.Accepted, res.Rejected)
		}
	}
	return resp
}

// ackStatus is the acknowledgement of the wire API that answers a request
// of class c: the one place where the backend's classes meet gRPC's
// messages.
func ackStatus(c backend.Class) ferryv1.AckStatus {
	switch c {
	case backend.ClassOK:
		return ferryv1.AckStatus_ACK_STATUS_OK
	case backend.ClassClient:
		return ferryv1.AckStatus_ACK_STATUS_CLIENT_ERROR
	default:
		// Anything else is retried: skipping could lose data.
		return ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR
	}
}

// unapplied is the answer to a request refused with err without applying
// it.
func (a *applier) unapplied(req *ferryv1.PushRequest, err error) answered {
	return answered{resp: a.answer(req, backend.Result{}, err), err: err}
}

// settle counts ans, the answer to req, logs it when it was applied and
// not OK, and returns it.
func (a *applier) settle(req *ferryv1.PushRequest, ans answered) *ferryv1.PushResponse {
	resp := ans.resp
	a.metrics.observe(resp, ans.took)
	if !ans.applied {
		return resp
	}
	if resp.Status == ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR {
		a.logServerError(req, ans.err)
	} else if resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
		a.logger.Debug("request not applied", "tenant", logging.Untrusted(req.Tenant), "partition", req.Partition,
			"offset", req.Offset, "status", resp.Status.String(), "reason", logging.Untrusted(resp.Reason))
	}
	return resp
}

// serverErrorLogInterval is how often the server errors of one tenant are
// logged at most: a failing disk fails every request, and the consumer
// retries each.
const serverErrorLogInterval = 10 * time.Second

// logServerError logs a request the backend answered SERVER_ERROR: at the
// default level, since it is the pusher's or its storage's failure and
// holds back the tenant's commits, but at most once per tenant per
// serverErrorLogInterval, with the count of those held back.
func (a *applier) logServerError(req *ferryv1.PushRequest, err error) {
	tenant := logging.Untrusted(req.Tenant)
	ok, suppressed := a.errLog.Allow(tenant)
	if !ok {
		return
	}
	a.logger.Error("request answered SERVER_ERROR: it is retried, and nothing past it is committed until it succeeds",
		"tenant", tenant, "partition", req.Partition, "offset", req.Offset,
		"cause", logging.Untrusted(fmt.Sprint(err)), "suppressed", suppressed)
}
