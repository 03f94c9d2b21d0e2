package pusher

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"
	v1reflectiongrpc "google.golang.org/grpc/reflection/grpc_reflection_v1"
	v1alphareflectiongrpc "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	ferryv1 "github.com/ferrylabs/ferry/proto/ferry/v1"
)

// RegisterReflection serves gRPC server reflection (v1 and v1alpha) on g.
// gogo registers its descriptors in its own registry, invisible to gRPC's
// reflection, so Ferry's types are resolved from the descriptor set embedded
// at generation time; protobuf-go's global registry still resolves the rest
// (health, reflection itself).
func RegisterReflection(g *grpc.Server) error {
	files, err := ferryFiles()
	if err != nil {
		return err
	}
	opts := reflection.ServerOptions{
		Services:           g,
		DescriptorResolver: chainResolver{files, protoregistry.GlobalFiles},
	}
	v1reflectiongrpc.RegisterServerReflectionServer(g, reflection.NewServerV1(opts))
	v1alphareflectiongrpc.RegisterServerReflectionServer(g, reflection.NewServer(opts))
	return nil
}

// ferryFiles parses the embedded descriptor set.
func ferryFiles() (*protoregistry.Files, error) {
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(ferryv1.DescriptorSet, &set); err != nil {
		return nil, fmt.Errorf("pusher: parse embedded descriptor set: %w", err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		return nil, fmt.Errorf("pusher: build descriptors: %w", err)
	}
	return files, nil
}

// chainResolver asks each resolver in turn.
type chainResolver []protodesc.Resolver

func (c chainResolver) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	for _, r := range c {
		if fd, err := r.FindFileByPath(path); err == nil {
			return fd, nil
		}
	}
	return nil, fmt.Errorf("file %q: %w", path, protoregistry.NotFound)
}

func (c chainResolver) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	for _, r := range c {
		if d, err := r.FindDescriptorByName(name); err == nil {
			return d, nil
		}
	}
	return nil, fmt.Errorf("descriptor %q: %w", name, protoregistry.NotFound)
}
