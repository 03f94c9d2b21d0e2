// Package ferryv1 holds the generated code of the ferry.v1 protocol and the
// descriptor set that server reflection serves.
package ferryv1

import _ "embed" // for the descriptor set

// DescriptorSet is the serialized google.protobuf.FileDescriptorSet of every
// proto file Ferry serves, with its imports. gogo keeps its descriptors in a
// registry that gRPC server reflection cannot see, so the pusher serves
// reflection from this set instead. `make generate` rebuilds it with the code.
//
//go:embed descriptors.binpb
var DescriptorSet []byte
