package pusher

import (
	"google.golang.org/grpc"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
	"github.com/ferrylabs/ferry/proto/wire"
)

// PushBatch serves a stream whose messages carry several requests each
// (see the proto). Every request goes through exactly what a Push
// stream's does, the stream's slot and the server's bytes, decoding,
// the sequencer and its batches, the answer's counting; only the framing
// differs: a message's requests are read one after the other, and the
// answers ready at the moment go out together in one message, those that
// become ready while the reader decodes a message's requests at its next
// wait (see outbox).
func (s *Server) PushBatch(stream ferryv1.PusherService_PushBatchServer) error {
	return s.serve(stream, newBatchOutbox(stream, s.newRoom()), readBatches)
}

// newBatchOutbox is a PushBatch stream's outbox: it holds answers while
// the reader decodes, and writes them in as few messages as the bound on
// a message allows.
func newBatchOutbox(stream grpc.ServerStream, room *streamHold) *outbox {
	var msg ferryv1.PushBatchResponse
	return newOutbox(stream, room, func(ready []readyAnswer) error {
		return writeBatches(stream, &msg, ready)
	}, true)
}

// readBatches is a PushBatch stream's reader: receive a message, admit
// its requests one after the other and hand each on, until the stream
// ends. Each request takes its slot and its bytes, and is decoded, as if
// it had come alone. The first slot is taken before the message is read,
// so a stream at its bound is not read at all; the message's other
// requests then wait for theirs, already read, which the bound on a
// message's size keeps small.
func readBatches(st *stream) error {
	var msg batchEnvelope
	var env envelope
	for {
		if err := st.out.recv(st.ctx, &msg); err != nil {
			return err
		}
		if msg.Len() == 0 {
			st.out.room.give() // the slot of a first request that is not there
			continue
		}
		for i := range msg.Len() {
			// decode swaps the envelope's buffer for a pooled one, which
			// the message's envelope keeps to read a later request into.
			e := msg.At(i)
			env.Envelope = *e
			err := st.admit(&env, i == 0)
			e.WriteRequest = env.WriteRequest
			if err != nil {
				return err
			}
		}
	}
}

// writeBatches sends ready in as few messages as the bound allows, msg
// being the message to reuse.
func writeBatches(stream grpc.ServerStream, msg *ferryv1.PushBatchResponse, ready []readyAnswer) error {
	// The message keeps no answer once sent: they are recycled.
	defer func() { clear(msg.Responses[:cap(msg.Responses)]) }()
	for start := 0; start < len(ready); start += maxAnswersPerMessage {
		part := ready[start:min(start+maxAnswersPerMessage, len(ready))]
		msg.Responses = msg.Responses[:0]
		for _, a := range part {
			msg.Responses = append(msg.Responses, a.resp)
		}
		if err := stream.SendMsg(msg); err != nil {
			return err
		}
	}
	return nil
}

// maxAnswersPerMessage bounds the answers of one PushBatchResponse, so
// that a message stays far below any receiver's message size limit even
// when every answer quotes a long reason.
const maxAnswersPerMessage = 1024

func pushBatchHandler(srv any, stream grpc.ServerStream) error {
	return srv.(*Server).PushBatch(pushBatchStream{stream})
}

// pushBatchStream is a PushBatch stream as PusherService_PushBatchServer.
// The server reads and writes its messages with RecvMsg and SendMsg (see
// readBatches, writeBatches); Send and Recv complete the interface.
type pushBatchStream struct{ grpc.ServerStream }

func (x pushBatchStream) Send(m *ferryv1.PushBatchResponse) error { return x.SendMsg(m) }

func (x pushBatchStream) Recv() (*ferryv1.PushBatchRequest, error) {
	m := new(ferryv1.PushBatchRequest)
	if err := x.RecvMsg(m); err != nil {
		return nil, err
	}
	return m, nil
}

// batchEnvelope is what the codec unmarshals a PushBatch message into: the
// envelope of each request, its write request still encoded.
type batchEnvelope struct {
	wire.BatchEnvelope
}

// Size is never needed: batch envelopes are only received.
func (e *batchEnvelope) Size() int { return 0 }

// MarshalToSizedBuffer is never needed: batch envelopes are only received.
func (e *batchEnvelope) MarshalToSizedBuffer([]byte) (int, error) { return 0, errEnvelopeSend }
