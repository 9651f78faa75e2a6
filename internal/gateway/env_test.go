package gateway_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/gateway"
	"github.com/claimd/claimd/internal/horizon"
	"github.com/claimd/claimd/internal/metrics"
	"github.com/claimd/claimd/internal/service"
	"github.com/claimd/claimd/internal/telemetry"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/testenv/testcert"
	"github.com/claimd/claimd/internal/tiers/memory"
	"github.com/claimd/claimd/internal/tiers/sqlite"
	"github.com/claimd/claimd/internal/tiers/tierstest"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

// Tokens of the test auth file.
var (
	hooksToken   = auth.NewToken() // hooks: claim and read in billing
	readerToken  = auth.NewToken() // reader: read in billing
	trickleToken = auth.NewToken() // trickle: one call, then one every 1000s
	writerToken  = auth.NewToken() // writer: claim (and nothing else) in billing
)

func authFile() string {
	return `version: 1
default_rate: unlimited
principals:
  hooks:
    tokens: ["` + auth.HashToken(hooksToken) + `"]
    namespaces: [billing]
    roles: [claim, read]
  reader:
    tokens: ["` + auth.HashToken(readerToken) + `"]
    namespaces: [billing]
    roles: [read]
  cn-hooks:
    identities: ["cn:hooks.billing"]
    namespaces: [billing]
    roles: [claim, read]
  writer:
    tokens: ["` + auth.HashToken(writerToken) + `"]
    namespaces: [billing]
    roles: [claim]
  trickle:
    tokens: ["` + auth.HashToken(trickleToken) + `"]
    namespaces: [billing]
    roles: [read]
    rate: {per_second: 0.001, burst: 1}
`
}

// maxRequestBytes is the test server's --max-request-bytes.
const maxRequestBytes = 64 << 10

// env is claimd's gRPC server as cmd/claimd builds it (metrics, tracing,
// auth interceptors in that order; the real service over the embedded
// tiers) served twice: on a gRPC listener and, through the gateway, on an
// HTTPS listener that asks for client certificates but does not require
// them, as the HTTP listener of claimd serve does.
type env struct {
	store    *tierstest.CountingStore
	promReg  *prometheus.Registry
	spans    *spanRecorder
	logs     *testenv.LogBuffer
	serverCA *testcert.CA
	clientCA *testcert.CA
	grpcAddr string
	httpURL  string
	srv      *grpc.Server
}

type envOptions struct {
	// requireCert is --tls-client-ca: the gRPC listener requires client
	// certificates and the API calls of the HTTP listener are held to it.
	requireCert bool
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	e := &env{promReg: prometheus.NewRegistry(), spans: newSpanRecorder(), logs: &testenv.LogBuffer{},
		serverCA: testcert.NewCA(t, "server ca"), clientCA: testcert.NewCA(t, "client ca")}
	log := slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	clk := clock.Real{}
	path := filepath.Join(t.TempDir(), "auth.yaml")
	writeFile(t, path, authFile())
	authn, err := auth.Load(path, auth.Options{Registerer: e.promReg, Logger: log, Clock: clk, Identity: auth.IdentityCN})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := horizon.Default()
	if err != nil {
		t.Fatal(err)
	}
	met, err := metrics.New(e.promReg, metrics.Config{Providers: reg, Clock: clk, NamespaceLabel: authn.NamespaceLabel})
	if err != nil {
		t.Fatal(err)
	}
	lite, err := sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "claimd.db")})
	if err != nil {
		t.Fatal(err)
	}
	store := twotier.New(memory.New(memory.Config{}), lite, twotier.Config{})
	t.Cleanup(func() { store.Close() })
	e.store = &tierstest.CountingStore{Store: store}

	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.spans))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	serverCert := e.serverCA.Issue(t, "claimd", "127.0.0.1").TLS
	clientAuth := tls.VerifyClientCertIfGiven
	if o.requireCert {
		clientAuth = tls.RequireAndVerifyClientCert
	}
	opts := append(met.ServerOptions(), grpc.StatsHandler(telemetry.ServerHandler(tp)), grpc.MaxRecvMsgSize(maxRequestBytes),
		grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: e.clientCA.Pool(), ClientAuth: clientAuth, MinVersion: tls.VersionTLS12})))
	opts = append(opts, gateway.RetryAfter()...)
	if o.requireCert {
		opts = append(opts, gateway.RequireClientCert()...)
	}
	opts = append(opts, authn.ServerOptions()...)
	opts = append(opts, authn.TapOption())
	srv := grpc.NewServer(opts...)
	e.srv = srv
	service.New(service.Config{Store: e.store, Registry: reg, Clock: clk, Logger: log, Recorder: met}).Register(srv)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	met.InitializeGRPC(srv)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.grpcAddr = lis.Addr().String()
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	h, err := gateway.New(srv, gateway.Config{MaxRequestBytes: maxRequestBytes, AllowedHosts: []string{"127.0.0.1", "localhost", "[::1]"},
		Authenticate: authn.Authenticate, RequireClientCert: o.requireCert, Pages: pageStub, PagePrefix: "/ui/"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(h)
	hs.EnableHTTP2 = true
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: e.clientCA.Pool(), ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}
	hs.StartTLS()
	t.Cleanup(hs.Close)
	e.httpURL = hs.URL
	return e
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// cred is what a caller presents: a bearer token, a client certificate,
// both or neither.
type cred struct {
	token string
	cert  *tls.Certificate
}

func (e *env) tlsConfig(c cred) *tls.Config {
	cfg := &tls.Config{RootCAs: e.serverCA.Pool(), MinVersion: tls.VersionTLS12}
	if c.cert != nil {
		cfg.Certificates = []tls.Certificate{*c.cert}
	}
	return cfg
}

// grpcConn dials the gRPC listener with c's certificate (its token goes
// in each call's metadata, see grpcCall).
func (e *env) grpcConn(t *testing.T, c cred) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(e.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(e.tlsConfig(c))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// httpClient speaks HTTP/1.1, as curl and most webhook frameworks do: no
// part of the gateway may need HTTP/2.
func (e *env) httpClient(t *testing.T, c cred) *http.Client {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: e.tlsConfig(c), ForceAttemptHTTP2: false}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// outcome is how one call ended, in terms every protocol can be compared
// in.
type outcome struct {
	code       codes.Code
	httpStatus int // 0 for gRPC
	reason     string
	fields     []string // BadRequest field violations
	principal  string   // ErrorInfo metadata "principal"
	retryInfo  bool     // a google.rpc.RetryInfo came with it
}

func outcomeOf(st *status.Status, httpStatus int) outcome {
	o := outcome{code: st.Code(), httpStatus: httpStatus}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			o.reason = d.GetReason()
			o.principal = d.GetMetadata()["principal"]
		case *errdetails.RetryInfo:
			o.retryInfo = d.GetRetryDelay().AsDuration() > 0
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				o.fields = append(o.fields, v.GetField())
			}
		}
	}
	return o
}

// methods maps a method's full name to its response type.
var methods = map[string]func() proto.Message{
	"/idempotency.v1.ClaimService/Claim":            func() proto.Message { return &pb.ClaimResponse{} },
	"/idempotency.v1.ClaimService/Transition":       func() proto.Message { return &pb.TransitionResponse{} },
	"/idempotency.v1.ClaimService/Renew":            func() proto.Message { return &pb.RenewResponse{} },
	"/idempotency.v1.ClaimService/Release":          func() proto.Message { return &pb.ReleaseResponse{} },
	"/idempotency.v1.ClaimService/Get":              func() proto.Message { return &pb.GetResponse{} },
	"/idempotency.v1.ProviderService/ListProviders": func() proto.Message { return &pb.ListProvidersResponse{} },
	"/idempotency.v1.ProviderService/GetProvider":   func() proto.Message { return &pb.GetProviderResponse{} },
}

// grpcCall makes the call on the gRPC listener.
func (e *env) grpcCall(t *testing.T, conn *grpc.ClientConn, c cred, method string, req proto.Message) (proto.Message, outcome) {
	t.Helper()
	ctx := context.Background()
	if c.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
	}
	resp := methods[method]()
	err := conn.Invoke(ctx, method, req, resp)
	return resp, outcomeOf(status.Convert(err), 0)
}

// restRoute is the google.api.http route of a request: the path carries
// the path variables (the key escaped as a client must), the body the rest.
func restRoute(method string, req proto.Message) (verb, path string, body proto.Message) {
	switch r := req.(type) {
	case *pb.ClaimRequest:
		return http.MethodPost, "/v1/claims", r
	case *pb.TransitionRequest:
		b := proto.CloneOf(r)
		b.Key = ""
		return http.MethodPost, "/v1/claims/" + escapeKey(r.GetKey()) + ":transition", b
	case *pb.RenewRequest:
		b := proto.CloneOf(r)
		b.Key = ""
		return http.MethodPost, "/v1/claims/" + escapeKey(r.GetKey()) + ":renew", b
	case *pb.ReleaseRequest:
		b := proto.CloneOf(r)
		b.Key = ""
		return http.MethodPost, "/v1/claims/" + escapeKey(r.GetKey()) + ":release", b
	case *pb.GetRequest:
		return http.MethodGet, "/v1/namespaces/" + escapeKey(r.GetNamespace()) + "/providers/" + escapeKey(r.GetProvider()) + "/claims/" + escapeKey(r.GetKey()), nil
	case *pb.ListProvidersRequest:
		return http.MethodGet, "/v1/providers", nil
	case *pb.GetProviderRequest:
		return http.MethodGet, "/v1/providers/" + escapeKey(r.GetName()), nil
	}
	panic("no REST route for " + method)
}

// escapeKey percent-encodes every byte but RFC 3986's unreserved ones, as
// JavaScript's encodeURIComponent does (it also leaves !'()* alone, which
// claimd's routes do not mind): "/" and ":" in particular must be escaped.
func escapeKey(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
		} else {
			b.WriteString("%" + strings.ToUpper(hex2(c)))
		}
	}
	return b.String()
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&15]})
}

// restCall makes the call on its REST route with JSON, as curl would.
func (e *env) restCall(t *testing.T, hc *http.Client, c cred, method string, req proto.Message) (proto.Message, outcome, []byte) {
	t.Helper()
	verb, path, body := restRoute(method, req)
	var rd io.Reader
	if body != nil {
		b, err := protojson.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	status, raw := e.do(t, hc, c, verb, path, "application/json", nil, rd)
	return decodeResult(t, method, status, raw, restError)
}

// connectCall makes the call with the Connect protocol's unary JSON
// encoding, as a Connect client (connect-es, connect-go with
// WithProtoJSON) sends it.
func (e *env) connectCall(t *testing.T, hc *http.Client, c cred, method string, req proto.Message) (proto.Message, outcome, []byte) {
	t.Helper()
	b, err := protojson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	status, raw := e.do(t, hc, c, http.MethodPost, method, "application/json", http.Header{"Connect-Protocol-Version": {"1"}}, bytes.NewReader(b))
	return decodeResult(t, method, status, raw, connectError)
}

func (e *env) do(t *testing.T, hc *http.Client, c cred, verb, path, contentType string, h http.Header, body io.Reader) (int, []byte) {
	t.Helper()
	r, err := http.NewRequest(verb, e.httpURL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		r.Header[k] = v
	}
	if body != nil {
		r.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		r.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := hc.Do(r)
	if err != nil {
		t.Fatalf("%s %s: %v", verb, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, raw
}

func decodeResult(t *testing.T, method string, httpStatus int, raw []byte, decodeErr func(*testing.T, []byte) *status.Status) (proto.Message, outcome, []byte) {
	t.Helper()
	if httpStatus == http.StatusOK {
		resp := methods[method]()
		if err := protojson.Unmarshal(raw, resp); err != nil {
			t.Fatalf("%s answered 200 with %s: %v", method, raw, err)
		}
		return resp, outcome{code: codes.OK, httpStatus: httpStatus}, raw
	}
	return nil, outcomeOf(decodeErr(t, raw), httpStatus), raw
}

// restError reads a REST error body: a google.rpc.Status in JSON, details
// as Any with their @type.
func restError(t *testing.T, raw []byte) *status.Status {
	t.Helper()
	var st spb.Status
	if err := protojson.Unmarshal(raw, &st); err != nil {
		t.Fatalf("REST error body %s is not a google.rpc.Status: %v", raw, err)
	}
	return status.FromProto(&st)
}

// connectError reads a Connect error body: {"code": "not_found",
// "message", "details": [{"type", "value": base64 of the message}]}.
func connectError(t *testing.T, raw []byte) *status.Status {
	t.Helper()
	var body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Details []struct {
			Type  string `json:"type"`
			Value string `json:"value"`
		} `json:"details"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("Connect error body %s: %v", raw, err)
	}
	code, ok := connectCodes[body.Code]
	if !ok {
		t.Fatalf("Connect error body %s: unknown code %q", raw, body.Code)
	}
	st := &spb.Status{Code: int32(code), Message: body.Message}
	for _, d := range body.Details {
		v, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(d.Value, "="))
		if err != nil {
			t.Fatalf("Connect error detail %q: %v", d.Value, err)
		}
		var m proto.Message
		switch d.Type {
		case "google.rpc.ErrorInfo":
			m = &errdetails.ErrorInfo{}
		case "google.rpc.BadRequest":
			m = &errdetails.BadRequest{}
		case "google.rpc.RetryInfo":
			m = &errdetails.RetryInfo{}
		default:
			t.Fatalf("Connect error detail of unexpected type %q", d.Type)
		}
		if err := proto.Unmarshal(v, m); err != nil {
			t.Fatal(err)
		}
		any, err := anypb.New(m)
		if err != nil {
			t.Fatal(err)
		}
		st.Details = append(st.Details, any)
	}
	return status.FromProto(st)
}

// connectCodes are the Connect protocol's code names.
var connectCodes = map[string]codes.Code{
	"canceled": codes.Canceled, "unknown": codes.Unknown, "invalid_argument": codes.InvalidArgument,
	"deadline_exceeded": codes.DeadlineExceeded, "not_found": codes.NotFound, "already_exists": codes.AlreadyExists,
	"permission_denied": codes.PermissionDenied, "resource_exhausted": codes.ResourceExhausted,
	"failed_precondition": codes.FailedPrecondition, "aborted": codes.Aborted, "out_of_range": codes.OutOfRange,
	"unimplemented": codes.Unimplemented, "internal": codes.Internal, "unavailable": codes.Unavailable,
	"data_loss": codes.DataLoss, "unauthenticated": codes.Unauthenticated,
}

// spanRecorder is tracetest's recorder that also leaves a token in ended
// each time it has recorded a span's end (one token stands for any number
// of ends), for endedSpan to wait on.
type spanRecorder struct {
	*tracetest.SpanRecorder
	ended chan struct{}
}

func newSpanRecorder() *spanRecorder {
	return &spanRecorder{SpanRecorder: tracetest.NewSpanRecorder(), ended: make(chan struct{}, 1)}
}

func (r *spanRecorder) OnEnd(s sdktrace.ReadOnlySpan) {
	r.SpanRecorder.OnEnd(s)
	select {
	case r.ended <- struct{}{}:
	default:
	}
}

// endedSpan waits for the span named name of kind to end, and fails the
// test after 10 s. A server span ends after the call's answer has gone out
// (grpc-go reports the call's end to the stats handler once the status is
// written), so a caller holding its answer may still be ahead of the span.
func (e *env) endedSpan(t *testing.T, name string, kind trace.SpanKind) sdktrace.ReadOnlySpan {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		for _, s := range e.spans.Ended() {
			if s.Name() == name && s.SpanKind() == kind {
				return s
			}
		}
		select {
		case <-e.spans.ended:
		case <-timeout:
			t.Fatalf("no %s span %s ended within 10s", kind, name)
			return nil
		}
	}
}
