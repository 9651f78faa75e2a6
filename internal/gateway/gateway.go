// Package gateway serves the services of claimd's gRPC server to callers
// without a gRPC stack: REST with JSON on the routes of the proto's
// google.api.http annotations (POST /v1/claims, …), the Connect protocol
// (JSON or binary, over HTTP/1.1 or HTTP/2) and gRPC-Web; gRPC itself
// passes through. Every call is transcoded (connectrpc.com/vanguard) into a
// gRPC call to the in-process grpc.Server, through its ServeHTTP, so the
// server's interceptors and stats handlers (validation, errors, metrics,
// logs, traces, authentication, authorization, rate limits) run exactly as
// they do for a call on the gRPC listener, and errors keep their gRPC code
// and details: Connect and REST map the code to an HTTP status and carry
// the google.rpc.ErrorInfo in the error body.
//
// What the HTTP request brings is what the gRPC call sees: its headers are
// the call's metadata (authorization: Bearer <token> reaches the auth
// interceptor), and on a TLS connection the client certificate the
// listener verified is the call's peer certificate.
//
// Before the transcoder reads a byte of a body, a front door (front.go)
// answers what headers alone decide: the Host and Origin, the content type
// of a write, the path-first rule of REST parameters, and who the caller
// is (Config.Authenticate, the auth interceptors' own check). A body is
// then read and gzip-decoded a buffer at a time, held to its bound
// (limit.go). So a stranger's body is never read, and nobody's body
// expands past twice --max-request-bytes.
package gateway

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"

	"connectrpc.com/connect"
	"connectrpc.com/vanguard"
	"connectrpc.com/vanguard/vanguardgrpc"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
	"github.com/claimd/claimd/internal/textclip"
)

// Config bounds what one HTTP request may bring and says whom the
// gateway answers.
type Config struct {
	// MaxRequestBytes is the gRPC server's largest request message
	// (--max-request-bytes). A request body as sent, and as decoded from
	// its Content-Encoding (gzip), may be up to twice as long, since JSON
	// spells bytes fields in base64, a third longer than the bytes (a
	// Claim's delivery body); the message it decodes to is then held to
	// MaxRequestBytes (by the JSON codec, or by the gRPC server itself),
	// so a call is refused RESOURCE_EXHAUSTED (413 over REST and Connect)
	// past the same size whatever its protocol.
	MaxRequestBytes int
	// AllowedHosts are the host names (and addresses) the API answers to
	// in Host and Origin headers (--http-allowed-hosts); "*" is any. At
	// least one is required.
	AllowedHosts []string
	// Authenticate, when set, checks a call's credentials from its
	// metadata and peer alone (auth.Authenticator.Authenticate), before its
	// body is read; its error is the gRPC status to answer.
	Authenticate func(ctx context.Context, method string) error
	// RequireClientCert refuses an API call without a client certificate
	// that the TLS layer verified (--tls-client-ca), before its body is
	// read; RequireClientCert's interceptors hold the calls to the same
	// rule inside the server.
	RequireClientCert bool
	// Pages, when set, serves the paths under PagePrefix (the on-call
	// page's files, internal/ui) beside the API. The front door admits them
	// by Host and Origin, and by client certificate under
	// RequireClientCert, like an API call, but without Authenticate: a
	// browser's navigation sends no bearer token, so the files must hold no
	// data (the page fetches it from the API with the caller's credentials).
	Pages http.Handler
	// PagePrefix is the path Pages serves, with its trailing slash ("/ui/");
	// the prefix without it is Pages' too.
	PagePrefix string
}

// New returns the handler that serves every service registered on srv,
// behind the front door (front.go). Call it after the last service is
// registered: the services are read once, here.
func New(srv *grpc.Server, cfg Config) (http.Handler, error) {
	if cfg.MaxRequestBytes <= 0 {
		return nil, errors.New("gateway: MaxRequestBytes must be positive")
	}
	if len(cfg.AllowedHosts) == 0 {
		return nil, errors.New("gateway: AllowedHosts must name at least one host")
	}
	if cfg.Pages != nil && (len(cfg.PagePrefix) < 3 || cfg.PagePrefix[0] != '/' || cfg.PagePrefix[len(cfg.PagePrefix)-1] != '/') {
		return nil, fmt.Errorf("gateway: PagePrefix %q must be a path that starts and ends with /", cfg.PagePrefix)
	}
	routes, err := newRouteTable(srv)
	if err != nil {
		return nil, err
	}
	// The body as sent, as decoded, and the response as written are
	// buffered whole while transcoded; maxBody bounds them. vanguard's own
	// limit is one byte higher, so that the front door's limits, which
	// give the reason, trip first.
	maxBody := min(2*int64(cfg.MaxRequestBytes), math.MaxUint32-1)
	buffer := uint32(maxBody + 1)
	t, err := vanguardgrpc.NewTranscoder(srv,
		vanguard.WithCodec(func(res vanguard.TypeResolver) vanguard.Codec { return newJSONCodec(res, cfg.MaxRequestBytes) }),
		// gzip decoded a buffer at a time and held to maxBody: vanguard's
		// default decompresses a body whole, whatever it expands to.
		vanguard.WithCompression(vanguard.CompressionGzip, func() connect.Compressor { return gzip.NewWriter(io.Discard) }, newBoundedGzip(maxBody)),
		vanguard.WithDefaultServiceOptions(
			vanguard.WithMaxMessageBufferBytes(buffer),
			// The server is in-process: compressing for it buys nothing,
			// and a body the transcoder decompresses passes through
			// boundedGzip, which names the limit it hit.
			vanguard.WithNoTargetCompression(),
			// vanguard answers a query parameter that names no field
			// UNKNOWN (500), blaming the server for a caller's typo. Query
			// parameters only ever fill GET requests, which read, so they
			// are ignored instead, as HTTP servers ignore a cache-buster.
			vanguard.WithRESTUnmarshalOptions(vanguard.RESTUnmarshalOptions{DiscardUnknownQueryParams: true}),
		),
	)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	return &front{
		// The service's log lines and audit rows name the protocol.
		next:        auth.MarkTransport(escapedPath(t)),
		routes:      routes,
		hosts:       newHostSet(cfg.AllowedHosts),
		auth:        cfg.Authenticate,
		requireCert: cfg.RequireClientCert,
		maxBody:     maxBody,
		pages:       cfg.Pages,
		pagePrefix:  cfg.PagePrefix,
	}, nil
}

// escapedPath routes on the path as the caller escaped it. vanguard
// matches REST routes against URL.Path, which net/http has already
// unescaped, so a key holding "/" (sent as %2F) would split into two
// segments and a key holding ":" (%3A) would be read as the start of the
// ":transition" verb. Given the escaped path, vanguard splits it on the
// caller's own "/" and ":" and unescapes each path variable itself (the
// google.api.http rule for single-segment variables). Connect and gRPC
// paths hold nothing to escape and are unchanged.
func escapedPath(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if escaped := r.URL.EscapedPath(); escaped != r.URL.Path {
			r2 := *r
			u := *r.URL
			u.Path, u.RawPath = escaped, ""
			r2.URL = &u
			r = &r2
		}
		next.ServeHTTP(w, r)
	})
}

// jsonCodec is vanguard's JSON codec made strict, with short errors, and
// held to the server's message size.
type jsonCodec struct {
	*vanguard.JSONCodec
	maxMessage int
}

// newJSONCodec refuses unknown fields instead of dropping them (vanguard's
// default): a misspelt "scope" dropped in silence would claim another key.
// It writes proto3's canonical JSON, as grpcurl and Connect clients do:
// a field at its zero value is left out, where vanguard's default would
// write every one, empty secrets and REASON_UNSPECIFIED included; the one
// exception is TransitionResponse.changed (see MarshalAppend).
func newJSONCodec(res vanguard.TypeResolver, maxMessage int) vanguard.Codec {
	c := vanguard.NewJSONCodec(res)
	c.UnmarshalOptions.DiscardUnknown = false
	c.MarshalOptions.EmitUnpopulated = false
	return jsonCodec{JSONCodec: c, maxMessage: maxMessage}
}

// MarshalAppend is JSONCodec.MarshalAppend, and a TransitionResponse
// always carries "changed": a repeated transition answers "changed":false
// rather than leaving it out, because a reader of the JSON asks exactly
// that (was this call the one that moved it?) and an absent field reads
// as "unknown". protojson has no per-field option, so the field is added
// to the object it wrote.
func (c jsonCodec) MarshalAppend(b []byte, msg proto.Message) ([]byte, error) {
	out, err := c.JSONCodec.MarshalAppend(b, msg)
	if tr, ok := msg.(*pb.TransitionResponse); !ok || err != nil || tr.GetChanged() {
		return out, err
	}
	obj := bytes.TrimRight(out[len(b):], " \n")
	if len(obj) < 2 || obj[len(obj)-1] != '}' {
		return nil, fmt.Errorf("gateway: TransitionResponse marshalled as %q, not a JSON object", obj)
	}
	field := `,"changed":false}`
	if len(bytes.TrimSpace(obj[1:len(obj)-1])) == 0 {
		field = field[1:]
	}
	return append(out[:len(b)+len(obj)-1], field...), nil
}

// maxErrorBytes bounds the text of a decoding error: protojson quotes the
// offending token, and a body is the caller's to fill.
const maxErrorBytes = 200

// Unmarshal is JSONCodec.Unmarshal with its error made the service's bad
// input: INVALID_ARGUMENT (400) with ErrorInfo reason INVALID_ARGUMENT,
// and the text clipped. (vanguard would answer a plain error UNKNOWN, 500.)
// The call never reaches the gRPC server, so it writes nothing.
// A message larger than the server takes is refused here with its reason
// (REQUEST_TOO_LARGE), as the gRPC server would refuse it without one.
func (c jsonCodec) Unmarshal(data []byte, msg proto.Message) error {
	if err := c.JSONCodec.Unmarshal(data, msg); err != nil {
		return invalidJSON(err)
	}
	if n := proto.Size(msg); n > c.maxMessage {
		return asConnect(refuse(http.StatusRequestEntityTooLarge, codes.ResourceExhausted, ReasonRequestTooLarge, "",
			"%s is %d bytes decoded, more than --max-request-bytes %d", msg.ProtoReflect().Descriptor().Name(), n, c.maxMessage))
	}
	return nil
}

func invalidJSON(err error) error {
	ce := connect.NewError(connect.CodeInvalidArgument, clipped(err))
	if d, derr := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: pb.ErrorReason_INVALID_ARGUMENT.String(), Domain: auth.ErrorDomain}); derr == nil {
		ce.AddDetail(d)
	}
	return ce
}

func clipped(err error) error {
	s := err.Error()
	if len(s) <= maxErrorBytes {
		return err
	}
	return errors.New(textclip.Cut(s, maxErrorBytes))
}

// The codec must keep vanguard's REST abilities (a GET's query and path
// parameters, body: "field").
var _ vanguard.RESTCodec = jsonCodec{}
