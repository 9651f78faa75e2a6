package service

import (
	"context"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/emptypb"
)

// A request that protobuf refuses to decode (typically a string field
// holding invalid UTF-8, which proto3 forbids) is bad input. grpc-go decodes
// the request before any interceptor or handler runs and answers a codec
// error INTERNAL "failed to unmarshal", whatever the codec says; so the
// service decodes its requests itself. Each method's handler is given a
// decode function that reads the message as an emptypb.Empty, which keeps
// every field as unknown bytes and validates nothing but the wire format,
// then unmarshals those bytes into the request and answers a failure
// INVALID_ARGUMENT naming the field.

// strictDecoding returns a copy of desc whose handlers decode requests with
// s.decode.
func (s *Service) strictDecoding(desc *grpc.ServiceDesc) *grpc.ServiceDesc {
	d := *desc
	d.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		handler, method := m.Handler, m.MethodName
		d.Methods[i] = grpc.MethodDesc{
			MethodName: method,
			Handler: func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
				return handler(srv, ctx, func(v any) error { return s.decode(ctx, method, dec, v) }, in)
			},
		}
	}
	return &d
}

// decode reads the request of method into v. A request that is not valid
// protobuf for v is answered INVALID_ARGUMENT and counted (not logged: it
// comes before authentication); a malformed wire format is still grpc-go's INTERNAL,
// since it is refused before the bytes are ours.
func (s *Service) decode(ctx context.Context, method string, dec func(any) error, v any) error {
	var raw emptypb.Empty
	if err := dec(&raw); err != nil {
		return err
	}
	m, ok := v.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "%s: request of type %T is not a protobuf message", method, v)
	}
	b := raw.ProtoReflect().GetUnknown()
	if err := proto.Unmarshal(b, m); err != nil {
		md := m.ProtoReflect().Descriptor()
		name := string(md.Name())
		viol := violation{field: name, desc: "malformed request: " + err.Error()}
		if field := invalidUTF8Field(md, b, name); field != "" {
			viol = violation{field: field, desc: "must be valid UTF-8"}
		}
		// grpc-go decodes before any interceptor runs, authentication and
		// its rate limit included: the refusal is counted, but not logged,
		// so that a stranger cannot write a log line per request at will.
		err := toStatus(&invalidArgument{violations: []violation{viol}})
		st := status.Convert(err)
		s.cfg.Recorder.Record(ctx, &Request{Method: method, Code: st.Code(), ErrReason: errorReason(st)})
		return err
	}
	return nil
}

// invalidUTF8Field returns the path (from path, the message's name) of the
// first string field of md in the wire bytes b that is not valid UTF-8, or
// "" when there is none. A string in a map entry names the map field.
func invalidUTF8Field(md protoreflect.MessageDescriptor, b []byte, path string) string {
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
		field := path + "." + string(fd.Name())
		switch fd.Kind() {
		case protoreflect.StringKind:
			if !utf8.Valid(v) {
				return field
			}
		case protoreflect.MessageKind:
			if inner := invalidUTF8Field(fd.Message(), v, field); inner != "" {
				if fd.IsMap() {
					return field
				}
				return inner
			}
		}
	}
	return ""
}
