package pusher

import (
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

// unapplied is the answer to a request refused with err without applying
// it.
func (s *Server) unapplied(req *ferryv1.PushRequest, err error) answered {
	return answered{resp: s.answer(req, backend.Result{}, err), err: err}
}

// settle counts a's answer to req, logs it when it was applied and not OK,
// and returns it.
func (s *Server) settle(req *ferryv1.PushRequest, a answered) *ferryv1.PushResponse {
	resp := a.resp
	s.metrics.observe(resp, a.took)
	if !a.applied {
		return resp
	}
	if resp.Status == ferryv1.AckStatus_ACK_STATUS_SERVER_ERROR {
		s.logServerError(req, a.err)
	} else if resp.Status != ferryv1.AckStatus_ACK_STATUS_OK {
		s.logger.Debug("request not applied", "tenant", logging.Untrusted(req.Tenant), "partition", req.Partition,
			"offset", req.Offset, "status", resp.Status.String(), "reason", logging.Untrusted(resp.Reason))
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
