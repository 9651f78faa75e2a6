package gateway

import (
	"errors"
	"fmt"
	"mime"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
)

// ErrorInfo reasons of the front door's own refusals, values of the proto's
// ErrorReason like the service's reasons that the front door also sends
// (INVALID_ARGUMENT, CREDENTIALS_MISSING, …).
var (
	// ReasonRequestTooLarge: the body as sent, as decoded from its
	// Content-Encoding, or the message it decodes to is past its bound
	// (RESOURCE_EXHAUSTED; HTTP 413).
	ReasonRequestTooLarge = pb.ErrorReason_REQUEST_TOO_LARGE.String()
	// ReasonHostNotAllowed: the request's Host is not one of
	// --http-allowed-hosts (PERMISSION_DENIED; HTTP 421).
	ReasonHostNotAllowed = pb.ErrorReason_HOST_NOT_ALLOWED.String()
	// ReasonOriginNotAllowed: the request carries an Origin whose host is
	// not one of --http-allowed-hosts (PERMISSION_DENIED; HTTP 403).
	ReasonOriginNotAllowed = pb.ErrorReason_ORIGIN_NOT_ALLOWED.String()
	// ReasonContentTypeUnsupported: a write without a JSON or protobuf
	// content type (INVALID_ARGUMENT; HTTP 415).
	ReasonContentTypeUnsupported = pb.ErrorReason_CONTENT_TYPE_UNSUPPORTED.String()
)

// reasonInvalid is the service's own reason for malformed input.
var reasonInvalid = pb.ErrorReason_INVALID_ARGUMENT.String()

// refusal is a request the front door answers itself, before the gRPC
// server sees it: so it writes nothing.
type refusal struct {
	httpStatus int // for REST and Connect unary; gRPC and gRPC-Web answer 200
	st         *status.Status
}

func (r *refusal) Error() string { return r.st.Message() }

// refuse builds a refusal whose ErrorInfo has reason and, when field is
// given, metadata "field".
func refuse(httpStatus int, code codes.Code, reason, field, format string, args ...any) *refusal {
	st := status.New(code, fmt.Sprintf(format, args...))
	info := &errdetails.ErrorInfo{Reason: reason, Domain: auth.ErrorDomain}
	if field != "" {
		info.Metadata = map[string]string{"field": field}
	}
	if with, err := st.WithDetails(info); err == nil {
		st = with
	}
	return &refusal{httpStatus: httpStatus, st: st}
}

// fromStatus is a refusal of the gRPC status error err (the auth
// interceptor's, for one), with HTTP status as vanguard maps its code.
func fromStatus(err error) *refusal {
	st := status.Convert(err)
	httpStatus := http.StatusForbidden
	switch st.Code() {
	case codes.Unauthenticated:
		httpStatus = http.StatusUnauthorized
	case codes.ResourceExhausted:
		httpStatus = http.StatusTooManyRequests
	case codes.InvalidArgument:
		httpStatus = http.StatusBadRequest
	}
	return &refusal{httpStatus: httpStatus, st: st}
}

// connectError is the refusal as connect-go's errors carry it.
func (r *refusal) connectError() *connect.Error {
	ce := connect.NewError(connect.Code(r.st.Code()), errors.New(r.st.Message()))
	for _, d := range r.st.Proto().GetDetails() {
		if m, err := d.UnmarshalNew(); err == nil {
			if cd, err := connect.NewErrorDetail(m); err == nil {
				ce.AddDetail(cd)
			}
		}
	}
	return ce
}

// errorWriter writes Connect, gRPC and gRPC-Web errors as connect-go's
// handlers do.
var errorWriter = connect.NewErrorWriter()

// write answers the request with the refusal in its protocol's form: a
// google.rpc.Status in JSON for REST (as vanguard writes REST errors), a
// Connect error for Connect unary calls (with the refusal's HTTP status,
// which Connect clients read as advice only), and grpc-status in headers
// or trailers for gRPC, gRPC-Web and Connect streams.
func (r *refusal) write(w http.ResponseWriter, req *http.Request, rpc bool) {
	if rpc && errorWriter.IsSupported(req) {
		if connectUnary(req) {
			w = statusOverride{ResponseWriter: w, status: r.httpStatus}
		}
		_ = errorWriter.Write(w, req, r.connectError())
		return
	}
	body, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(r.st.Proto())
	if err != nil {
		body = []byte(`{"code":13,"message":"the error could not be written"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(r.httpStatus)
	_, _ = w.Write(body)
}

// connectUnary reports whether req is a unary call of the Connect
// protocol: a GET, or a POST of application/json or application/proto.
func connectUnary(req *http.Request) bool {
	if req.Method == http.MethodGet {
		return true
	}
	mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	return mt == "application/json" || mt == "application/proto"
}

// statusOverride writes status in place of the one its caller chose.
type statusOverride struct {
	http.ResponseWriter
	status int
}

func (s statusOverride) WriteHeader(int) { s.ResponseWriter.WriteHeader(s.status) }

// maxEcho bounds how much of a caller's string a refusal quotes: the front
// door never echoes hostile input in full.
const maxEcho = 64
