package gateway_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
)

// caller is one protocol's way to make a call; every test below runs the
// same calls through each.
type caller struct {
	name string
	call func(t *testing.T, method string, req proto.Message) (proto.Message, outcome, []byte)
}

func (e *env) callers(t *testing.T, c cred) []caller {
	hc := e.httpClient(t, c)
	return []caller{
		{"rest", func(t *testing.T, m string, req proto.Message) (proto.Message, outcome, []byte) {
			return e.restCall(t, hc, c, m, req)
		}},
		{"connect", func(t *testing.T, m string, req proto.Message) (proto.Message, outcome, []byte) {
			return e.connectCall(t, hc, c, m, req)
		}},
	}
}

// ok makes a call that must succeed and returns its response and the raw
// JSON it came in.
func ok[M proto.Message](t *testing.T, c caller, method string, req proto.Message) (M, map[string]any) {
	t.Helper()
	resp, o, raw := c.call(t, method, req)
	if o.code != codes.OK {
		t.Fatalf("%s %s = %+v (%s), want OK", c.name, method, o, raw)
	}
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	return resp.(M), fields
}

// TestEveryRPC drives every RPC of ClaimService and ProviderService over
// REST (JSON on the google.api.http routes) and over Connect (JSON), with
// a bearer token in the Authorization header, through a claim's whole
// life: claim, PROCESSING, renew, SETTLED with a result, the duplicate
// that reads the result back, Get, and a second claim released. bytes
// fields travel as base64, byte for byte.
func TestEveryRPC(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, c := range e.callers(t, cred{token: hooksToken}) {
		t.Run(c.name, func(t *testing.T) {
			event := "evt/" + c.name + ":1 ?#%"
			payload := sha256.Sum256([]byte("delivery body of " + c.name))
			claim := &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: event},
				Scope: "refund", PayloadSha256: payload[:], Holder: "pod-a", Lease: durationpb.New(time.Minute)}
			acq, raw := ok[*pb.ClaimResponse](t, c, "/idempotency.v1.ClaimService/Claim", claim)
			if acq.GetOutcome() != pb.Outcome_OUTCOME_ACQUIRED || acq.GetFencingToken() != 1 || len(acq.GetLeaseSecret()) != 16 {
				t.Fatalf("Claim = %v, want ACQUIRED with token 1 and a 16-byte secret", acq)
			}
			if want := event + "\x1frefund"; acq.GetKey() != want {
				t.Fatalf("Claim key = %q, want %q", acq.GetKey(), want)
			}
			if raw["leaseSecret"] != base64.StdEncoding.EncodeToString(acq.GetLeaseSecret()) {
				t.Errorf("leaseSecret in JSON = %v, want the secret in base64", raw["leaseSecret"])
			}
			key, secret := acq.GetKey(), acq.GetLeaseSecret()

			tr, _ := ok[*pb.TransitionResponse](t, c, "/idempotency.v1.ClaimService/Transition", &pb.TransitionRequest{
				Namespace: "billing", Provider: "stripe", Key: key, FencingToken: 1, LeaseSecret: secret, To: pb.EventState_EVENT_STATE_PROCESSING})
			if !tr.GetChanged() || tr.GetRecord().GetState() != pb.EventState_EVENT_STATE_PROCESSING {
				t.Fatalf("Transition PROCESSING = %v", tr)
			}
			before := tr.GetRecord().GetLeaseExpiresAt().AsTime()
			rn, _ := ok[*pb.RenewResponse](t, c, "/idempotency.v1.ClaimService/Renew", &pb.RenewRequest{
				Namespace: "billing", Provider: "stripe", Key: key, FencingToken: 1, LeaseSecret: secret, Lease: durationpb.New(2 * time.Minute)})
			if !rn.GetRecord().GetLeaseExpiresAt().AsTime().After(before) {
				t.Errorf("Renew lease_expires_at = %v, want after %v", rn.GetRecord().GetLeaseExpiresAt().AsTime(), before)
			}
			// Not valid UTF-8, with a quote and a NUL: JSON can only carry
			// it as base64.
			result := []byte{0, 1, 0xff, '"', 0xfe, '\\'}
			settled, _ := ok[*pb.TransitionResponse](t, c, "/idempotency.v1.ClaimService/Transition", &pb.TransitionRequest{
				Namespace: "billing", Provider: "stripe", Key: key, FencingToken: 1, LeaseSecret: secret, To: pb.EventState_EVENT_STATE_SETTLED, Result: result})
			if !settled.GetChanged() || settled.GetRecord().GetState() != pb.EventState_EVENT_STATE_SETTLED {
				t.Fatalf("Transition SETTLED = %v", settled)
			}
			// A repeat (a handler whose reply was lost) changes nothing and
			// says so in the JSON: "changed":false, not a missing field.
			repeat, raw := ok[*pb.TransitionResponse](t, c, "/idempotency.v1.ClaimService/Transition", &pb.TransitionRequest{
				Namespace: "billing", Provider: "stripe", Key: key, FencingToken: 1, LeaseSecret: secret, To: pb.EventState_EVENT_STATE_SETTLED, Result: result})
			if repeat.GetChanged() || raw["changed"] != false || repeat.GetRecord().GetState() != pb.EventState_EVENT_STATE_SETTLED {
				t.Fatalf("repeated Transition SETTLED = %v, JSON changed = %v, want the settled record and \"changed\":false", repeat, raw["changed"])
			}

			claim.Holder = "pod-b"
			dup, raw := ok[*pb.ClaimResponse](t, c, "/idempotency.v1.ClaimService/Claim", claim)
			if dup.GetOutcome() != pb.Outcome_OUTCOME_DUPLICATE || !bytes.Equal(dup.GetResult(), result) || len(dup.GetLeaseSecret()) != 0 {
				t.Fatalf("second Claim = %v, want DUPLICATE with result %x and no secret", dup, result)
			}
			if raw["result"] != base64.StdEncoding.EncodeToString(result) {
				t.Errorf("result in JSON = %v, want %q", raw["result"], base64.StdEncoding.EncodeToString(result))
			}
			// proto3 JSON leaves zero values out: no secret, not an empty one.
			if v, ok := raw["leaseSecret"]; ok {
				t.Errorf("a duplicate's JSON carries leaseSecret %q, want none", v)
			}

			got, raw := ok[*pb.GetResponse](t, c, "/idempotency.v1.ClaimService/Get", &pb.GetRequest{Namespace: "billing", Provider: "stripe", Key: key})
			rec := got.GetRecord()
			if rec.GetKey() != key || rec.GetState() != pb.EventState_EVENT_STATE_SETTLED || !bytes.Equal(rec.GetResult(), result) || !bytes.Equal(rec.GetPayloadSha256(), payload[:]) {
				t.Errorf("Get = %v, want the settled record with its result and payload hash", rec)
			}
			if r, _ := raw["record"].(map[string]any); r["payloadSha256"] != base64.StdEncoding.EncodeToString(payload[:]) {
				t.Errorf("payloadSha256 in JSON = %v, want the hash in base64", r["payloadSha256"])
			}

			other := &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_release_" + c.name}}
			acq2, _ := ok[*pb.ClaimResponse](t, c, "/idempotency.v1.ClaimService/Claim", other)
			rel, _ := ok[*pb.ReleaseResponse](t, c, "/idempotency.v1.ClaimService/Release", &pb.ReleaseRequest{
				Namespace: "billing", Provider: "stripe", Key: acq2.GetKey(), FencingToken: acq2.GetFencingToken(), LeaseSecret: acq2.GetLeaseSecret()})
			if !rel.GetRecord().GetReleased() {
				t.Errorf("Release = %v, want released", rel)
			}
			again, _ := ok[*pb.ClaimResponse](t, c, "/idempotency.v1.ClaimService/Claim", other)
			if again.GetOutcome() != pb.Outcome_OUTCOME_ACQUIRED || again.GetReason() != pb.Reason_REASON_RELEASED || again.GetFencingToken() != 2 {
				t.Errorf("Claim after Release = %v, want ACQUIRED/RELEASED with token 2", again)
			}

			list, _ := ok[*pb.ListProvidersResponse](t, c, "/idempotency.v1.ProviderService/ListProviders", &pb.ListProvidersRequest{})
			if !slices.ContainsFunc(list.GetProviders(), func(p *pb.Provider) bool { return p.GetName() == "stripe" }) {
				t.Errorf("ListProviders = %d providers, want stripe among them", len(list.GetProviders()))
			}
			prov, raw := ok[*pb.GetProviderResponse](t, c, "/idempotency.v1.ProviderService/GetProvider", &pb.GetProviderRequest{Name: "stripe"})
			if prov.GetProvider().GetName() != "stripe" || prov.GetProvider().GetTtl().AsDuration() <= 0 {
				t.Errorf("GetProvider(stripe) = %v", prov)
			}
			if p, _ := raw["provider"].(map[string]any); p["ttl"] != prov.GetProvider().GetTtl().AsDuration().String() && !strings.HasSuffix(p["ttl"].(string), "s") {
				t.Errorf("ttl in JSON = %v, want a protobuf Duration string", p["ttl"])
			}
		})
	}
}

// TestConnectClients: connect-go's own clients (Connect with binary
// protobuf over HTTP/2, Connect with JSON over HTTP/1.1, gRPC-Web), the
// protocols a TypeScript or browser client speaks, reach the same service
// and get the same typed errors.
func TestConnectClients(t *testing.T) {
	e := newEnv(t, envOptions{})
	h1 := e.httpClient(t, cred{})
	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: e.tlsConfig(cred{}), ForceAttemptHTTP2: true}}
	for _, tc := range []struct {
		name string
		hc   *http.Client
		opts []connect.ClientOption
	}{
		{"connect+proto over HTTP/2", h2, nil},
		{"connect+json over HTTP/1.1", h1, []connect.ClientOption{connect.WithProtoJSON()}},
		{"grpc-web over HTTP/1.1", h1, []connect.ClientOption{connect.WithGRPCWeb()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claim := connect.NewClient[pb.ClaimRequest, pb.ClaimResponse](tc.hc, e.httpURL+"/idempotency.v1.ClaimService/Claim", tc.opts...)
			req := connect.NewRequest(&pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_" + tc.name}})
			req.Header().Set("Authorization", "Bearer "+hooksToken)
			resp, err := claim.CallUnary(context.Background(), req)
			if err != nil || resp.Msg.GetOutcome() != pb.Outcome_OUTCOME_ACQUIRED || len(resp.Msg.GetLeaseSecret()) != 16 {
				t.Fatalf("Claim = %v, %v; want ACQUIRED with a secret", resp, err)
			}
			req = connect.NewRequest(&pb.ClaimRequest{Namespace: "billing", Provider: "nope", Key: &pb.ClaimRequest_EventId{EventId: "evt_1"}})
			req.Header().Set("Authorization", "Bearer "+hooksToken)
			_, err = claim.CallUnary(context.Background(), req)
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeNotFound || reasonOf(ce) != "PROVIDER_NOT_FOUND" {
				t.Fatalf("Claim of provider nope = %v, want not_found with reason PROVIDER_NOT_FOUND", err)
			}
			get := connect.NewClient[pb.GetProviderRequest, pb.GetProviderResponse](tc.hc, e.httpURL+"/idempotency.v1.ProviderService/GetProvider", tc.opts...)
			_, err = get.CallUnary(context.Background(), connect.NewRequest(&pb.GetProviderRequest{Name: "stripe"}))
			if !errors.As(err, &ce) || ce.Code() != connect.CodeUnauthenticated || reasonOf(ce) != "CREDENTIALS_MISSING" {
				t.Fatalf("GetProvider without a token = %v, want unauthenticated with reason CREDENTIALS_MISSING", err)
			}
		})
	}
}

// httpStatus is the HTTP status REST and Connect give a gRPC code
// (google.rpc.Code's mapping, which Connect shares for these codes).
var httpStatus = map[codes.Code]int{
	codes.OK: 200, codes.InvalidArgument: 400, codes.FailedPrecondition: 400, codes.NotFound: 404,
	codes.PermissionDenied: 403, codes.Unauthenticated: 401, codes.Aborted: 409, codes.ResourceExhausted: 429,
	codes.Unavailable: 503,
}

// TestErrorsMatchGRPC: every refusal a caller can meet comes over REST and
// Connect with the gRPC call's code (as the HTTP status of that code), its
// ErrorInfo reason and principal, and its BadRequest fields, and writes
// nothing.
func TestErrorsMatchGRPC(t *testing.T) {
	e := newEnv(t, envOptions{})
	hooks := cred{token: hooksToken}
	conn := e.grpcConn(t, cred{})
	claim := func(event string) *pb.ClaimResponse {
		resp, o := e.grpcCall(t, conn, hooks, "/idempotency.v1.ClaimService/Claim",
			&pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: event}})
		if o.code != codes.OK {
			t.Fatalf("Claim(%s) = %+v", event, o)
		}
		return resp.(*pb.ClaimResponse)
	}
	held := claim("evt_held")
	// evt_taken is claimed, released and claimed again: token 1 is stale.
	first := claim("evt_taken")
	if _, o := e.grpcCall(t, conn, hooks, "/idempotency.v1.ClaimService/Release", &pb.ReleaseRequest{Namespace: "billing", Provider: "stripe",
		Key: first.GetKey(), FencingToken: 1, LeaseSecret: first.GetLeaseSecret()}); o.code != codes.OK {
		t.Fatalf("Release = %+v", o)
	}
	claim("evt_taken")
	otherSecret := bytes.Repeat([]byte{7}, 16)

	for _, tc := range []struct {
		desc   string
		cred   cred
		method string
		req    proto.Message
		want   outcome
		// byStore: the store decides the refusal (and writes nothing,
		// which the tiers' own tests prove); the others never reach it.
		byStore bool
	}{
		{"control character in event_id", hooks, "/idempotency.v1.ClaimService/Claim",
			&pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt\x01ctl"}},
			outcome{code: codes.InvalidArgument, reason: "INVALID_ARGUMENT", fields: []string{"event_id"}}, false},
		{"unknown provider", hooks, "/idempotency.v1.ClaimService/Claim",
			&pb.ClaimRequest{Namespace: "billing", Provider: "nope", Key: &pb.ClaimRequest_EventId{EventId: "evt_1"}},
			outcome{code: codes.NotFound, reason: "PROVIDER_NOT_FOUND"}, false},
		{"unknown provider (GetProvider)", hooks, "/idempotency.v1.ProviderService/GetProvider", &pb.GetProviderRequest{Name: "nope"},
			outcome{code: codes.NotFound, reason: "PROVIDER_NOT_FOUND"}, false},
		{"no record", hooks, "/idempotency.v1.ClaimService/Get", &pb.GetRequest{Namespace: "billing", Provider: "stripe", Key: "evt_never"},
			outcome{code: codes.NotFound, reason: "RECORD_NOT_FOUND"}, false},
		{"RECEIVED to SETTLED", hooks, "/idempotency.v1.ClaimService/Transition", &pb.TransitionRequest{Namespace: "billing", Provider: "stripe",
			Key: held.GetKey(), FencingToken: 1, LeaseSecret: held.GetLeaseSecret(), To: pb.EventState_EVENT_STATE_SETTLED},
			outcome{code: codes.FailedPrecondition, reason: "INVALID_TRANSITION"}, true},
		{"another's secret", hooks, "/idempotency.v1.ClaimService/Transition", &pb.TransitionRequest{Namespace: "billing", Provider: "stripe",
			Key: held.GetKey(), FencingToken: 1, LeaseSecret: otherSecret, To: pb.EventState_EVENT_STATE_PROCESSING},
			outcome{code: codes.PermissionDenied, reason: "NOT_OWNER"}, true},
		{"stale token", hooks, "/idempotency.v1.ClaimService/Renew", &pb.RenewRequest{Namespace: "billing", Provider: "stripe",
			Key: first.GetKey(), FencingToken: 1, LeaseSecret: first.GetLeaseSecret()},
			// ABORTED by the proto's contract; FAILED_PRECONDITION before
			// the service adopts it. Whichever gRPC says, HTTP must say too.
			outcome{code: anyCode, reason: "STALE_TOKEN"}, true},
		{"stranger", cred{}, "/idempotency.v1.ClaimService/Claim",
			&pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_stranger"}},
			outcome{code: codes.Unauthenticated, reason: "CREDENTIALS_MISSING"}, false},
		{"stranger (ListProviders)", cred{}, "/idempotency.v1.ProviderService/ListProviders", &pb.ListProvidersRequest{},
			outcome{code: codes.Unauthenticated, reason: "CREDENTIALS_MISSING"}, false},
		{"unknown token", cred{token: "cl_not-a-token"}, "/idempotency.v1.ClaimService/Release", &pb.ReleaseRequest{Namespace: "billing", Provider: "stripe",
			Key: held.GetKey(), FencingToken: 1, LeaseSecret: held.GetLeaseSecret()},
			outcome{code: codes.Unauthenticated, reason: "TOKEN_UNKNOWN"}, false},
		{"reader claims", cred{token: readerToken}, "/idempotency.v1.ClaimService/Claim",
			&pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_reader"}},
			outcome{code: codes.PermissionDenied, reason: "ROLE_DENIED", principal: "reader"}, false},
		{"foreign namespace", hooks, "/idempotency.v1.ClaimService/Get", &pb.GetRequest{Namespace: "payouts", Provider: "stripe", Key: "evt_held"},
			outcome{code: codes.PermissionDenied, reason: "NAMESPACE_DENIED", principal: "hooks"}, false},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			writes := e.store.Writes.Load()
			_, got := e.grpcCall(t, e.grpcConn(t, cred{}), tc.cred, tc.method, tc.req)
			// Field paths are the service's; compare them by their last
			// element, which names the field.
			if (tc.want.code != anyCode && got.code != tc.want.code) || got.reason != tc.want.reason || got.principal != tc.want.principal || !lastElements(got.fields, tc.want.fields) {
				t.Fatalf("over gRPC: %+v, want %+v", got, tc.want)
			}
			want := got
			want.httpStatus = httpStatus[want.code]
			for _, c := range e.callers(t, tc.cred) {
				_, o, raw := c.call(t, tc.method, tc.req)
				if diff := cmp.Diff(want, o, cmp.AllowUnexported(outcome{})); diff != "" {
					t.Errorf("over %s (-gRPC +%s):\n%s\nbody: %s", c.name, c.name, diff, raw)
				}
			}
			if w := e.store.Writes.Load(); w != writes && !tc.byStore {
				t.Errorf("the refused calls reached the store %d times", w-writes)
			}
		})
	}
}

// anyCode in a case accepts the code gRPC answers.
const anyCode = codes.Code(1 << 20)

func lastElements(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] && !strings.HasSuffix(got[i], "."+want[i]) {
			return false
		}
	}
	return true
}

// TestRateLimitOverHTTP: a principal over its rate is refused over REST and
// Connect as over gRPC: RESOURCE_EXHAUSTED (429), reason RATE_LIMITED, and
// a RetryInfo saying when to come back. Its one token is spent on gRPC:
// the limit is the principal's, whatever protocol it calls with.
func TestRateLimitOverHTTP(t *testing.T) {
	e := newEnv(t, envOptions{})
	trickle := cred{token: trickleToken}
	conn := e.grpcConn(t, cred{})
	req := &pb.GetProviderRequest{Name: "stripe"}
	if _, o := e.grpcCall(t, conn, trickle, "/idempotency.v1.ProviderService/GetProvider", req); o.code != codes.OK {
		t.Fatalf("first call = %+v, want OK (burst 1)", o)
	}
	_, got := e.grpcCall(t, conn, trickle, "/idempotency.v1.ProviderService/GetProvider", req)
	want := outcome{code: codes.ResourceExhausted, reason: "RATE_LIMITED", principal: "trickle", retryInfo: true}
	if !cmp.Equal(got, want, cmp.AllowUnexported(outcome{})) {
		t.Fatalf("second call over gRPC = %+v, want %+v", got, want)
	}
	want.httpStatus = 429
	for _, c := range e.callers(t, trickle) {
		if _, o, raw := c.call(t, "/idempotency.v1.ProviderService/GetProvider", req); !cmp.Equal(o, want, cmp.AllowUnexported(outcome{})) {
			t.Errorf("over %s = %+v %s, want %+v", c.name, o, raw, want)
		}
	}
}

// TestAwkwardKeysOverREST: a key holding "/", ":", "%", "?", "#", spaces,
// dot segments, a doubled slash, non-ASCII, or the scope separator U+001F
// travels in the REST path when it is percent-encoded like
// encodeURIComponent does, and names the same record as in the body.
func TestAwkwardKeysOverREST(t *testing.T) {
	e := newEnv(t, envOptions{})
	hooks := cred{token: hooksToken}
	hc := e.httpClient(t, hooks)
	for i, event := range []string{"a/b", "a:b:transition", "100%", "%2F", "..", ".", "a//b", "q?x=1#frag", "two words", "zürich €", "/leading", "trailing/"} {
		acq, o, raw := e.restCall(t, hc, hooks, "/idempotency.v1.ClaimService/Claim",
			&pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: event}, Scope: string(rune('a' + i))})
		if o.code != codes.OK {
			t.Fatalf("Claim(%q) = %+v %s", event, o, raw)
		}
		key := acq.(*pb.ClaimResponse).GetKey()
		got, o, raw := e.restCall(t, hc, hooks, "/idempotency.v1.ClaimService/Get", &pb.GetRequest{Namespace: "billing", Provider: "stripe", Key: key})
		if o.code != codes.OK || got.(*pb.GetResponse).GetRecord().GetKey() != key {
			t.Errorf("Get(%q) through %s = %+v %s", key, escapeKey(key), o, raw)
			continue
		}
		acqd := acq.(*pb.ClaimResponse)
		tr, o, raw := e.restCall(t, hc, hooks, "/idempotency.v1.ClaimService/Transition", &pb.TransitionRequest{Namespace: "billing", Provider: "stripe",
			Key: key, FencingToken: acqd.GetFencingToken(), LeaseSecret: acqd.GetLeaseSecret(), To: pb.EventState_EVENT_STATE_PROCESSING})
		if o.code != codes.OK || tr.(*pb.TransitionResponse).GetRecord().GetKey() != key {
			t.Errorf("Transition(%q) through %s = %+v %s", key, escapeKey(key), o, raw)
		}
	}
}

// TestClientCertificates: with --tls-client-ca the HTTP listener asks for
// a certificate (probes come without) and the API calls it carries are
// held to gRPC's rule: a verified certificate is required, token or not,
// and the certificate's identity is the principal the auth file names.
func TestClientCertificates(t *testing.T) {
	e := newEnv(t, envOptions{requireCert: true})
	cert := e.clientCA.Issue(t, "hooks.billing").TLS
	withCert := cred{cert: &cert}
	for _, c := range e.callers(t, withCert) {
		t.Run(c.name, func(t *testing.T) {
			req := &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_mtls_" + c.name}}
			if _, o, raw := c.call(t, "/idempotency.v1.ClaimService/Claim", req); o.code != codes.OK {
				t.Fatalf("Claim with the certificate of cn-hooks = %+v %s, want OK", o, raw)
			}
			req.Namespace = "payouts"
			want := outcome{code: codes.PermissionDenied, httpStatus: 403, reason: "NAMESPACE_DENIED", principal: "cn-hooks"}
			if _, o, raw := c.call(t, "/idempotency.v1.ClaimService/Claim", req); !cmp.Equal(o, want, cmp.AllowUnexported(outcome{})) {
				t.Errorf("Claim in payouts with the certificate of cn-hooks = %+v %s, want %+v", o, raw, want)
			}
		})
	}
	writes := e.store.Writes.Load()
	for _, c := range e.callers(t, cred{token: hooksToken}) {
		req := &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: "evt_token_only"}}
		want := outcome{code: codes.Unauthenticated, httpStatus: 401, reason: "CREDENTIALS_MISSING"}
		if _, o, raw := c.call(t, "/idempotency.v1.ClaimService/Claim", req); !cmp.Equal(o, want, cmp.AllowUnexported(outcome{})) {
			t.Errorf("%s: Claim with a token and no certificate = %+v %s, want %+v", c.name, o, raw, want)
		}
	}
	if w := e.store.Writes.Load(); w != writes {
		t.Errorf("calls without a certificate reached the store %d times", w-writes)
	}
}

// TestInterceptorsSeeHTTPCalls: a REST call is a gRPC call to every
// interceptor and stats handler: the metrics count it by method and code,
// and the tracer makes its server span in the caller's trace (W3C
// traceparent header).
func TestInterceptorsSeeHTTPCalls(t *testing.T) {
	e := newEnv(t, envOptions{})
	hooks := cred{token: hooksToken}
	hc := e.httpClient(t, hooks)
	traceID := "4bf92f3577b34da6a3ce929d0e0e4736"
	body := `{"namespace":"billing","provider":"stripe","eventId":"evt_traced"}`
	status, raw := e.do(t, hc, hooks, http.MethodPost, "/v1/claims", "application/json",
		http.Header{"Traceparent": {"00-" + traceID + "-00f067aa0ba902b7-01"}}, strings.NewReader(body))
	if status != 200 {
		t.Fatalf("POST /v1/claims = %d %s", status, raw)
	}
	if status, raw := e.do(t, hc, hooks, http.MethodGet, "/v1/providers/nope", "", nil, nil); status != 404 {
		t.Fatalf("GET /v1/providers/nope = %d %s", status, raw)
	}

	handled := map[string]float64{}
	mfs, err := e.promReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "grpc_server_handled_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			handled[l["grpc_method"]+" "+l["grpc_code"]] = m.GetCounter().GetValue()
		}
	}
	if handled["Claim OK"] != 1 || handled["GetProvider NotFound"] != 1 {
		t.Errorf("grpc_server_handled_total: Claim OK %v, GetProvider NotFound %v; want 1 and 1", handled["Claim OK"], handled["GetProvider NotFound"])
	}

	s := e.endedSpan(t, "idempotency.v1.ClaimService/Claim", trace.SpanKindServer)
	if got := s.SpanContext().TraceID().String(); got != traceID {
		t.Errorf("Claim's server span is in trace %s, want the caller's %s", got, traceID)
	}
}

// TestBounds: a request larger than --max-request-bytes is refused
// RESOURCE_EXHAUSTED over REST as over gRPC (413 REQUEST_TOO_LARGE over
// REST, not 429, which says to come back later), whether its JSON or the
// message it decodes to is too large, and a JSON body with a field the
// message does not have is refused INVALID_ARGUMENT, with an error that
// does not quote the caller's input at length; none of them writes.
func TestBounds(t *testing.T) {
	e := newEnv(t, envOptions{})
	hooks := cred{token: hooksToken}
	hc := e.httpClient(t, hooks)
	writes := e.store.Writes.Load()

	// The message is just over the limit; its JSON (base64) is longer
	// still but within the transcoder's buffer: the gRPC server refuses it.
	big := &pb.ClaimRequest{Namespace: "billing", Provider: "stripe", Key: &pb.ClaimRequest_Delivery{Delivery: &pb.Delivery{Body: make([]byte, maxRequestBytes)}}}
	_, o := e.grpcCall(t, e.grpcConn(t, cred{}), hooks, "/idempotency.v1.ClaimService/Claim", big)
	if o.code != codes.ResourceExhausted {
		t.Errorf("gRPC Claim of %d bytes = %+v, want RESOURCE_EXHAUSTED", proto.Size(big), o)
	}
	if _, o, raw := e.restCall(t, hc, hooks, "/idempotency.v1.ClaimService/Claim", big); o.code != codes.ResourceExhausted || o.httpStatus != 413 || o.reason != "REQUEST_TOO_LARGE" {
		t.Errorf("REST Claim of %d bytes = %+v %.200s, want 413 RESOURCE_EXHAUSTED REQUEST_TOO_LARGE", proto.Size(big), o, raw)
	}
	// JSON past twice the limit is refused before it is read whole.
	huge := `{"namespace":"billing","provider":"stripe","eventId":"evt_huge","holder":"` + strings.Repeat("x", 2*maxRequestBytes) + `"}`
	if status, raw := e.do(t, hc, hooks, http.MethodPost, "/v1/claims", "application/json", nil, strings.NewReader(huge)); status != 413 {
		t.Errorf("REST Claim of %d bytes of JSON = %d %.200s, want 413", len(huge), status, raw)
	}

	long := strings.Repeat("scope", 1000)
	status, raw := e.do(t, hc, hooks, http.MethodPost, "/v1/claims", "application/json", nil,
		strings.NewReader(`{"namespace":"billing","provider":"stripe","eventId":"evt_typo","`+long+`":"refund"}`))
	if st := restError(t, raw); status != 400 || st.Code() != codes.InvalidArgument {
		t.Errorf("REST Claim with an unknown field = %d %s, want 400 INVALID_ARGUMENT", status, raw)
	} else if len(st.Message()) > 400 {
		t.Errorf("error message of an unknown field is %d bytes long, want it clipped", len(st.Message()))
	}
	if w := e.store.Writes.Load(); w != writes {
		t.Errorf("refused requests reached the store %d times", w-writes)
	}

	// A query parameter that names no field is ignored, not a server error.
	if status, raw := e.do(t, hc, hooks, http.MethodGet, "/v1/providers/stripe?cachebust=1", "", nil, nil); status != 200 {
		t.Errorf("GET /v1/providers/stripe?cachebust=1 = %d %s, want 200", status, raw)
	}
}

// reasonOf is the ErrorInfo reason of a Connect error.
func reasonOf(ce *connect.Error) string {
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if info, ok := v.(*errdetails.ErrorInfo); ok {
				return info.GetReason()
			}
		}
	}
	return ""
}
