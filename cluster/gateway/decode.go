package gateway

import (
	"context"
	"fmt"
	"slices"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/norsk-oss/norsk-manager/proto/managerpb"
)

// checkedServiceDesc returns the Manager service's description with every
// method's request decoding checked (decodeChecked): a request that does
// not decode is InvalidArgument naming the field, and one over a map or
// list limit (checkRequestLimits) is refused before any interceptor (ACL,
// audit) or handler runs. The generated handlers decode the request
// before they call the interceptors, so this is the one place that sees
// every request, unary and streamed, and its decoding error.
func checkedServiceDesc() *grpc.ServiceDesc {
	sd := managerpb.Manager_ServiceDesc
	sd.Methods = slices.Clone(sd.Methods)
	for i := range sd.Methods {
		h := sd.Methods[i].Handler
		sd.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			return h(srv, ctx, func(v any) error { return decodeChecked(dec, v) }, ic)
		}
	}
	sd.Streams = slices.Clone(sd.Streams)
	for i := range sd.Streams {
		h := sd.Streams[i].Handler
		sd.Streams[i].Handler = func(srv any, st grpc.ServerStream) error { return h(srv, checkedStream{st}) }
	}
	return &sd
}

// checkedStream checks the request of a server-streaming method as it is
// received.
type checkedStream struct{ grpc.ServerStream }

// RecvMsg receives the request and checks it (decodeChecked).
func (s checkedStream) RecvMsg(m any) error { return decodeChecked(s.ServerStream.RecvMsg, m) }

// decodeChecked decodes a request into v with recv (gRPC's decoder) and
// checks it. gRPC's own decoding error names nothing ("string field
// contains invalid UTF-8", as Internal), so the request is received as
// unknown fields of an Empty (which keeps the bytes as they came) and
// decoded here: a failure is InvalidArgument naming the field with its
// path ("job.services[1].name: is not valid UTF-8", issue 21 §11). A
// request that decodes must pass checkRequestLimits. Errors of recv
// itself (io.EOF, a cancelled stream, an oversized message's
// ResourceExhausted) are returned as they are; so is bytes that are not
// protobuf at all, which gRPC has already answered as Internal ("failed
// to unmarshal") before recv returns, so no handler code can change it.
func decodeChecked(recv func(any) error, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return recv(v)
	}
	var raw emptypb.Empty
	if err := recv(&raw); err != nil {
		return err
	}
	b := raw.ProtoReflect().GetUnknown()
	if err := proto.Unmarshal(b, m); err != nil {
		r := m.ProtoReflect().Descriptor()
		if p := invalidUTF8Path(requestRoots[r.FullName()], r, b); p != "" {
			return invalid(p, "is not valid UTF-8: every string field of a request must be (nothing was done)")
		}
		return status.Errorf(codes.InvalidArgument, "request: does not decode as %s: %v (nothing was done)", r.FullName(), err)
	}
	return checkRequestLimits(m)
}

// invalidUTF8Path returns the path of the first string field of b (the
// wire bytes of a message of md, named path) that is not valid UTF-8, as
// "job.services[1].name" or "tags.key" (a map entry's key or value); ""
// if there is none or b is not well formed.
func invalidUTF8Path(path string, md protoreflect.MessageDescriptor, b []byte) string {
	seen := map[protowire.Number]int{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		if typ != protowire.BytesType || fd == nil {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return ""
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		p := joinPath(path, string(fd.Name()))
		if fd.IsList() {
			p = fmt.Sprintf("%s[%d]", p, seen[num])
		}
		seen[num]++
		switch {
		case fd.Kind() == protoreflect.StringKind && !utf8.Valid(v):
			return p
		case fd.Message() != nil:
			if q := invalidUTF8Path(p, fd.Message(), v); q != "" {
				return q
			}
		}
	}
	return ""
}
