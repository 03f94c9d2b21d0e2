package pusher

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	rpbalpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/ferrylabs/ferry/limits"
	"github.com/ferrylabs/ferry/proto/prompb"
	"github.com/ferrylabs/ferry/pusher/backend"
)

// reflectFunc asks a reflection service one question on a stream of its
// own.
type reflectFunc func(ctx context.Context, t *testing.T, req *rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse

// reflectV1 asks grpc.reflection.v1.ServerReflection.
func reflectV1(conn *grpc.ClientConn) reflectFunc {
	return func(ctx context.Context, t *testing.T, req *rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
		t.Helper()
		stream, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(req); err != nil {
			t.Fatalf("Send: %v", err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		return resp
	}
}

// reflectV1Alpha asks grpc.reflection.v1alpha.ServerReflection. Its
// messages have the same fields as v1's, so they are converted through the
// wire format and the tests stay the same for both.
func reflectV1Alpha(conn *grpc.ClientConn) reflectFunc {
	return func(ctx context.Context, t *testing.T, req *rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
		t.Helper()
		var alphaReq rpbalpha.ServerReflectionRequest //nolint:staticcheck // v1alpha is deprecated, and still what older grpcurl builds ask
		convert(t, req, &alphaReq)
		stream, err := rpbalpha.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&alphaReq); err != nil {
			t.Fatalf("Send: %v", err)
		}
		alphaResp, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		var resp rpb.ServerReflectionResponse
		convert(t, alphaResp, &resp)
		return &resp
	}
}

// convert copies from into a message with the same wire format.
func convert(t *testing.T, from, to proto.Message) {
	t.Helper()
	b, err := proto.Marshal(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(b, to); err != nil {
		t.Fatal(err)
	}
}

// reflectionVersions are the reflection services the pusher serves.
var reflectionVersions = []struct {
	name string
	new  func(*grpc.ClientConn) reflectFunc
}{
	{"v1", reflectV1},
	{"v1alpha", reflectV1Alpha},
}

func TestReflectionListsServices(t *testing.T) {
	for _, v := range reflectionVersions {
		t.Run(v.name, func(t *testing.T) {
			checkGoroutines(t)
			h := startServer(t, testConfig(t), &stubBackend{})
			resp := v.new(h.conn)(testContext(t), t, &rpb.ServerReflectionRequest{
				MessageRequest: &rpb.ServerReflectionRequest_ListServices{},
			})
			var names []string
			for _, s := range resp.GetListServicesResponse().GetService() {
				names = append(names, s.Name)
			}
			for _, want := range []string{
				"ferry.v1.PusherService",
				"grpc.health.v1.Health",
				"grpc.reflection.v1.ServerReflection",
				"grpc.reflection.v1alpha.ServerReflection",
			} {
				if !slices.Contains(names, want) {
					t.Errorf("ListServices = %q, want it to contain %s", names, want)
				}
			}
		})
	}
}

// reflectedFiles asks for the file defining symbol and builds the returned
// file descriptors, its imports included, into a registry.
func reflectedFiles(ctx context.Context, t *testing.T, ask reflectFunc, symbol string) *protoregistry.Files {
	t.Helper()
	resp := ask(ctx, t, &rpb.ServerReflectionRequest{
		MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: symbol},
	})
	if e := resp.GetErrorResponse(); e != nil {
		t.Fatalf("FileContainingSymbol(%s): error %d %s", symbol, e.ErrorCode, e.ErrorMessage)
	}
	var set descriptorpb.FileDescriptorSet
	for _, b := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
		fd := new(descriptorpb.FileDescriptorProto)
		if err := proto.Unmarshal(b, fd); err != nil {
			t.Fatalf("file descriptor: %v", err)
		}
		set.File = append(set.File, fd)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		t.Fatalf("build the reflected files: %v", err)
	}
	return files
}

// findDescriptor returns the descriptor of name from files.
func findDescriptor[D protoreflect.Descriptor](t *testing.T, files *protoregistry.Files, name protoreflect.FullName) D {
	t.Helper()
	d, err := files.FindDescriptorByName(name)
	if err != nil {
		t.Fatalf("find %s: %v", name, err)
	}
	typed, ok := d.(D)
	if !ok {
		t.Fatalf("%s is a %T", name, d)
	}
	return typed
}

func TestReflectionDescribesThePusher(t *testing.T) {
	for _, v := range reflectionVersions {
		t.Run(v.name, func(t *testing.T) {
			checkGoroutines(t)
			h := startServer(t, testConfig(t), &stubBackend{})
			files := reflectedFiles(testContext(t), t, v.new(h.conn), "ferry.v1.PusherService")

			svc := findDescriptor[protoreflect.ServiceDescriptor](t, files, "ferry.v1.PusherService")
			for _, m := range []struct {
				name           protoreflect.Name
				in, out        protoreflect.FullName
				client, server bool
			}{
				{"Push", "ferry.v1.PushRequest", "ferry.v1.PushResponse", true, true},
				{"PushOne", "ferry.v1.PushRequest", "ferry.v1.PushResponse", false, false},
				{"Sync", "ferry.v1.SyncRequest", "ferry.v1.SyncResponse", false, false},
			} {
				md := svc.Methods().ByName(m.name)
				if md == nil {
					t.Errorf("method %s missing", m.name)
					continue
				}
				if md.Input().FullName() != m.in || md.Output().FullName() != m.out ||
					md.IsStreamingClient() != m.client || md.IsStreamingServer() != m.server {
					t.Errorf("method %s(%s) %s, streaming %t/%t; want (%s) %s, %t/%t", m.name,
						md.Input().FullName(), md.Output().FullName(), md.IsStreamingClient(), md.IsStreamingServer(),
						m.in, m.out, m.client, m.server)
				}
			}

			req := findDescriptor[protoreflect.MessageDescriptor](t, files, "ferry.v1.PushRequest")
			wr := req.Fields().ByName("write_request")
			if wr == nil || wr.Kind() != protoreflect.MessageKind || wr.Message().FullName() != "ferry.prompb.v1.WriteRequest" {
				t.Fatalf("PushRequest.write_request = %v, want a ferry.prompb.v1.WriteRequest", wr)
			}
			// The imported messages are complete: a sample's fields resolve.
			sample := findDescriptor[protoreflect.MessageDescriptor](t, files, "ferry.prompb.v1.Sample")
			if f := sample.Fields().ByName("timestamp"); f == nil || f.Kind() != protoreflect.Int64Kind {
				t.Errorf("ferry.prompb.v1.Sample.timestamp = %v, want an int64", f)
			}
		})
	}
}

func TestReflectionMatchesGeneratedCode(t *testing.T) {
	checkGoroutines(t)
	h := startServer(t, testConfig(t), &stubBackend{})
	files := reflectedFiles(testContext(t), t, reflectV1(h.conn), "ferry.v1.PusherService")
	svc := findDescriptor[protoreflect.ServiceDescriptor](t, files, serviceName)
	var generated []string
	for _, m := range h.svc.grpc.GetServiceInfo()[serviceName].Methods {
		generated = append(generated, m.Name)
	}
	var reflected []string
	for i := range svc.Methods().Len() {
		reflected = append(reflected, string(svc.Methods().Get(i).Name()))
	}
	slices.Sort(generated)
	slices.Sort(reflected)
	if !slices.Equal(generated, reflected) {
		t.Errorf("reflected methods %q, generated %q: is the embedded descriptor set stale?", reflected, generated)
	}
}

func TestReflectionUnknownSymbol(t *testing.T) {
	checkGoroutines(t)
	h := startServer(t, testConfig(t), &stubBackend{})
	resp := reflectV1(h.conn)(testContext(t), t, &rpb.ServerReflectionRequest{
		MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "ferry.v1.NoSuchService"},
	})
	if resp.GetErrorResponse() == nil {
		t.Errorf("FileContainingSymbol of an unknown symbol = %v, want an error response", resp)
	}
}

// rawCodec sends and receives messages already in wire format.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: unmarshal into %T", v)
	}
	*b = data.Materialize()
	return nil
}

// TestReflectionDynamicCall calls PushOne the way grpcurl does: the request
// is built from the reflected descriptors and a JSON body, with none of
// Ferry's generated code.
func TestReflectionDynamicCall(t *testing.T) {
	const body = `{"tenant":"t1","writeRequest":{"timeseries":[{"labels":[{"name":"__name__","value":"up"}],` +
		`"samples":[{"value":1,"timestamp":"1700000000000"}]}]}}`
	for _, tc := range []struct {
		name string
		// invoke calls PushOne with req and decodes the answer into resp.
		invoke func(ctx context.Context, t *testing.T, conn *grpc.ClientConn, req, resp *dynamicpb.Message)
	}{
		{
			name: "should accept a dynamic message through the default proto codec",
			invoke: func(ctx context.Context, t *testing.T, conn *grpc.ClientConn, req, resp *dynamicpb.Message) {
				t.Helper()
				err := conn.Invoke(ctx, "/ferry.v1.PusherService/PushOne", req, resp,
					grpc.ForceCodecV2(encoding.GetCodecV2("proto")))
				if err != nil {
					t.Fatalf("Invoke: %v", err)
				}
			},
		},
		{
			name: "should accept the marshalled bytes of a dynamic message",
			invoke: func(ctx context.Context, t *testing.T, conn *grpc.ClientConn, req, resp *dynamicpb.Message) {
				t.Helper()
				in, err := proto.Marshal(req)
				if err != nil {
					t.Fatal(err)
				}
				var out []byte
				if err := conn.Invoke(ctx, "/ferry.v1.PusherService/PushOne", &in, &out, grpc.ForceCodecV2(rawCodec{})); err != nil {
					t.Fatalf("Invoke: %v", err)
				}
				if err := proto.Unmarshal(out, resp); err != nil {
					t.Fatalf("unmarshal the answer: %v", err)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkGoroutines(t)
			type call struct {
				tenant string
				req    *prompb.WriteRequest
			}
			calls := make(chan call, 1)
			b := &stubBackend{push: func(_ context.Context, tenant string, req *prompb.WriteRequest) (backend.Result, error) {
				// A copy: the request's memory is reused once answered.
				enc, err := req.Marshal()
				var kept prompb.WriteRequest
				if err == nil {
					err = kept.Unmarshal(enc)
				}
				if err != nil {
					return backend.Result{}, err
				}
				calls <- call{tenant, &kept}
				return backend.Result{Accepted: backend.Count(req)}, nil
			}}
			h := startServer(t, testConfig(t), b)
			ctx := testContext(t)
			files := reflectedFiles(ctx, t, reflectV1(h.conn), "ferry.v1.PusherService")
			method := findDescriptor[protoreflect.ServiceDescriptor](t, files, "ferry.v1.PusherService").Methods().ByName("PushOne")

			req := dynamicpb.NewMessage(method.Input())
			if err := (protojson.UnmarshalOptions{Resolver: dynamicpb.NewTypes(files)}).Unmarshal([]byte(body), req); err != nil {
				t.Fatalf("JSON body: %v", err)
			}
			resp := dynamicpb.NewMessage(method.Output())
			tc.invoke(ctx, t, h.conn, req, resp)

			got := await(ctx, t, "the backend call", calls)
			if got.tenant != "t1" {
				t.Errorf("backend got tenant %q, want t1", got.tenant)
			}
			if n := len(got.req.Timeseries); n != 1 {
				t.Fatalf("backend got %d series, want 1", n)
			}
			ts := got.req.Timeseries[0]
			if limits.FormatLabels(ts.Labels) != `{__name__="up"}` || len(ts.Samples) != 1 ||
				ts.Samples[0].Value != 1 || ts.Samples[0].Timestamp != 1_700_000_000_000 {
				t.Errorf("backend got %s %v, want {__name__=\"up\"} [{1 1700000000000}]", limits.FormatLabels(ts.Labels), ts.Samples)
			}

			st := resp.Get(method.Output().Fields().ByName("status")).Enum()
			if name := method.Output().Fields().ByName("status").Enum().Values().ByNumber(st).Name(); name != "ACK_STATUS_OK" {
				t.Errorf("status = %s, want ACK_STATUS_OK", name)
			}
			if n := resp.Get(method.Output().Fields().ByName("accepted_samples")).Int(); n != 1 {
				t.Errorf("accepted_samples = %d, want 1", n)
			}
		})
	}
}
