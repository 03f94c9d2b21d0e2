package pusher

import (
	"context"
	"sync"

	"google.golang.org/grpc"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

// serviceDesc registers the Pusher service with handlers of our own
// rather than the generated ones, for one reason: the generated PushOne
// handler decodes the whole request with the generated decoder before the
// server sees it, and that decoder turns a 4 MiB request of empty series
// into 740 MB. Ours reads PushOne's envelope first and decodes its write
// request with wire.Decoder under the limits, as a stream does. Push,
// PushBatch (batchstream.go) and Sync are what the generated handlers do.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*ferryv1.PusherServiceServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "PushOne", Handler: pushOneHandler},
		{MethodName: "Sync", Handler: syncHandler},
	},
	Streams: []grpc.StreamDesc{
		{StreamName: "Push", Handler: pushHandler, ServerStreams: true, ClientStreams: true},
		{StreamName: "PushBatch", Handler: pushBatchHandler, ServerStreams: true, ClientStreams: true},
	},
	Metadata: "ferry/v1/pusher.proto",
}

func pushHandler(srv any, stream grpc.ServerStream) error {
	return srv.(*Server).Push(pushStream{stream})
}

// pushStream is a Push stream as PusherService_PushServer.
type pushStream struct{ grpc.ServerStream }

func (x pushStream) Send(m *ferryv1.PushResponse) error { return x.SendMsg(m) }

func (x pushStream) Recv() (*ferryv1.PushRequest, error) {
	m := new(ferryv1.PushRequest)
	if err := x.RecvMsg(m); err != nil {
		return nil, err
	}
	return m, nil
}

func pushOneHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) { //nolint:revive // grpc.MethodHandler's signature
	// The envelope is pooled, as a stream keeps one for all its requests:
	// its encoded write request goes on in a pooledRequest, and it takes
	// that one's previous buffer for the next call to read into.
	env := envelopePool.Get().(*envelope)
	defer releaseEnvelope(env)
	if err := dec(env); err != nil {
		return nil, err
	}
	s := srv.(*Server)
	if interceptor == nil {
		return s.pushOneCall.handler(ctx, env)
	}
	return interceptor(ctx, env, &s.pushOneCall.info, s.pushOneCall.handler)
}

// unaryCall is what a server passes its interceptors for every call of a
// unary method, built once per server instead of per call.
type unaryCall struct {
	info    grpc.UnaryServerInfo
	handler grpc.UnaryHandler
}

// newPushOneCall is PushOne's unaryCall for s.
func newPushOneCall(s *Server) unaryCall {
	return unaryCall{
		info: grpc.UnaryServerInfo{Server: s, FullMethod: "/" + serviceName + "/PushOne"},
		handler: func(ctx context.Context, req any) (any, error) {
			return s.pushOne(ctx, req.(*envelope)), nil
		},
	}
}

func syncHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) { //nolint:revive // grpc.MethodHandler's signature
	in := new(ferryv1.SyncRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	s := srv.(*Server)
	handler := func(ctx context.Context, req any) (any, error) { return s.Sync(ctx, req.(*ferryv1.SyncRequest)) }
	if interceptor == nil {
		return handler(ctx, in)
	}
	return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + serviceName + "/Sync"}, handler)
}

var envelopePool = sync.Pool{New: func() any { return new(envelope) }}

// releaseEnvelope returns a PushOne call's envelope to the pool once the
// call, interceptors included, is done with it.
func releaseEnvelope(env *envelope) {
	if cap(env.WriteRequest) > maxPooledBytes {
		return
	}
	env.Request = ferryv1.PushRequest{}
	env.WriteRequest = env.WriteRequest[:0]
	envelopePool.Put(env)
}
