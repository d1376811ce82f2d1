package datastore

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// requestCodec is the gRPC server's codec: gRPC's own, except that a
// request's fields nemo does not know are dropped as it is read, as the
// service drops what it does not know, rather than kept in the message,
// where they would be stored with the entity and sent back to readers.
type requestCodec struct{ encoding.CodecV2 }

func newRequestCodec() requestCodec {
	return requestCodec{encoding.GetCodecV2(grpcproto.Name)}
}

var discardUnknown = proto.UnmarshalOptions{DiscardUnknown: true}

func (requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("datastore frontend: cannot unmarshal into %T", v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return discardUnknown.Unmarshal(buf.ReadOnlyData(), m)
}
