package auth_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
)

func claimReq(ns, id string) *pb.ClaimRequest {
	return &pb.ClaimRequest{Namespace: ns, Provider: "stripe", Key: &pb.ClaimRequest_EventId{EventId: id}}
}

func TestTokenPrincipal(t *testing.T) {
	e := newEnv(t)
	c := e.claims(t, nil)
	for _, ns := range []string{"billing", "payouts-eu"} {
		r, err := c.Claim(as(hooksToken), claimReq(ns, "evt_1"))
		if err != nil {
			t.Fatalf("Claim(namespace %s) as billing-hooks error = %v", ns, err)
		}
		if r.GetOutcome() != pb.Outcome_OUTCOME_ACQUIRED {
			t.Errorf("Claim(namespace %s) outcome = %v, want ACQUIRED", ns, r.GetOutcome())
		}
		want := auth.Principal{Name: "billing-hooks", Roles: auth.RoleClaim | auth.RoleRead, Via: "token"}
		if got := *e.seen.Load(); got != want {
			t.Errorf("handler saw principal %+v, want %+v", got, want)
		}
	}
	// The scheme is case-insensitive (RFC 9110).
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "bearer "+hooksToken)
	if _, err := c.Get(ctx, &pb.GetRequest{Namespace: "billing", Provider: "stripe", Key: "evt_1"}); err != nil {
		t.Errorf(`Get with "bearer <token>" error = %v`, err)
	}
	e.noSecrets(t)
}

// TestMTLSPrincipal: a client certificate names its principal by one kind
// of identity (--tls-identity): the first URI SAN by default, else the
// first DNS SAN or the CN; no other part of it is read, so a certificate
// whose identity of that kind names nobody is refused even when another
// part would name a principal.
func TestMTLSPrincipal(t *testing.T) {
	envs := map[auth.IdentityKind]*env{}
	for _, k := range auth.IdentityKinds {
		envs[k] = newEnvWith(t, auth.Options{Identity: k})
	}
	e := envs[auth.IdentityURI]
	tests := []struct {
		desc  string
		kind  auth.IdentityKind
		leaf  leaf
		token string
		want  string // principal name; "" when refused
		via   string
		code  codes.Code
		why   string
		msg   string // in the refusal's message
	}{
		{"uri: SPIFFE ID", auth.IdentityURI, leaf{cn: "x", uris: []string{spiffeID}}, "", "spiffe-hooks", "mtls", codes.OK, "", ""},
		{"uri: only the first URI SAN is read", auth.IdentityURI, leaf{uris: []string{"spiffe://example.org/unknown", spiffeID}}, "", "", "", codes.Unauthenticated, auth.ReasonIdentityUnknown,
			`first URI SAN "spiffe://example.org/unknown" (--tls-identity uri`},
		{"uri: a DNS SAN of a principal is not read", auth.IdentityURI, leaf{dns: []string{"hooks.billing.svc"}}, "", "", "", codes.Unauthenticated, auth.ReasonIdentityUnknown,
			"has no URI SAN, the one identity --tls-identity uri reads"},
		{"uri: a CN of a principal is not read (random DNS SAN, CN=hooks)", auth.IdentityURI, leaf{cn: "hooks", dns: []string{"random.example.net"}}, "", "", "", codes.Unauthenticated, auth.ReasonIdentityUnknown,
			"has no URI SAN"},
		{"uri: certificate and token of one principal", auth.IdentityURI, leaf{uris: []string{spiffeID}}, spiffeToken, "spiffe-hooks", "token+mtls", codes.OK, "", ""},
		{"uri: certificate of nobody, valid token", auth.IdentityURI, leaf{cn: "hooks", uris: []string{"spiffe://example.org/stranger"}}, hooksToken, "billing-hooks", "token", codes.OK, "", ""},
		{"uri: certificate and token of different principals", auth.IdentityURI, leaf{uris: []string{spiffeID}}, hooksToken, "", "", codes.Unauthenticated, auth.ReasonPrincipalConflict, "names spiffe-hooks"},
		{"uri: known certificate, unknown token", auth.IdentityURI, leaf{uris: []string{spiffeID}}, auth.NewToken(), "", "", codes.Unauthenticated, auth.ReasonTokenUnknown, ""},
		{"dns: DNS SAN, any case", auth.IdentityDNS, leaf{dns: []string{"Hooks.Billing.svc"}}, "", "dns-hooks", "mtls", codes.OK, "", ""},
		{"dns: only the first DNS SAN is read", auth.IdentityDNS, leaf{dns: []string{"other.svc", "hooks.billing.svc"}}, "", "", "", codes.Unauthenticated, auth.ReasonIdentityUnknown,
			`first DNS SAN "dns:other.svc" (--tls-identity dns`},
		{"dns: a SPIFFE ID or CN of a principal is not read", auth.IdentityDNS, leaf{cn: "hooks", uris: []string{spiffeID}}, "", "", "", codes.Unauthenticated, auth.ReasonIdentityUnknown,
			"has no DNS SAN"},
		{"cn: CN", auth.IdentityCN, leaf{cn: "hooks"}, "", "cn-hooks", "mtls", codes.OK, "", ""},
		{"cn: SANs of principals are not read", auth.IdentityCN, leaf{cn: "stranger", dns: []string{"hooks.billing.svc"}, uris: []string{spiffeID}}, "", "", "", codes.Unauthenticated, auth.ReasonIdentityUnknown,
			`subject common name "cn:stranger" (--tls-identity cn`},
		{"cn: no CN", auth.IdentityCN, leaf{uris: []string{spiffeID}}, "", "", "", codes.Unauthenticated, auth.ReasonIdentityUnknown, "has no subject common name"},
		{"cn: certificate and token of different principals", auth.IdentityCN, leaf{cn: "hooks"}, hooksToken, "", "", codes.Unauthenticated, auth.ReasonPrincipalConflict, ""},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			e := envs[tc.kind]
			c := e.claims(t, e.clientCert(t, tc.leaf))
			ctx := context.Background()
			if tc.token != "" {
				ctx = as(tc.token)
			}
			e.seen.Store(nil)
			before := e.store.Writes.Load()
			_, err := c.Claim(ctx, claimReq("billing", "evt_"+strings.ReplaceAll(tc.desc, " ", "_")))
			if tc.code != codes.OK {
				wantRefused(t, "Claim", err, tc.code, tc.why)
				if msg := status.Convert(err).Message(); !strings.Contains(msg, tc.msg) {
					t.Errorf("Claim error message = %q, want it to say %q", msg, tc.msg)
				}
				if e.store.Writes.Load() != before {
					t.Errorf("a refused Claim reached the store")
				}
				return
			}
			if err != nil {
				t.Fatalf("Claim error = %v", err)
			}
			if got := e.seen.Load(); got == nil || got.Name != tc.want || got.Via != tc.via {
				t.Errorf("handler saw principal %+v, want %s via %s", got, tc.want, tc.via)
			}
		})
	}
	// A certificate from another CA fails the TLS handshake: the call
	// never reaches the interceptor.
	other := newCA(t, "rogue ca").issue(t, leaf{uris: []string{spiffeID}}, x509.ExtKeyUsageClientAuth)
	if _, err := e.claims(t, &other).Claim(context.Background(), claimReq("billing", "evt_rogue")); codeOf(err) != codes.Unavailable {
		t.Errorf("Claim with a certificate of another CA error = %v, want Unavailable (handshake refused)", err)
	}
	e.noSecrets(t)
}

func codeOf(err error) codes.Code { c, _ := errorInfo(err); return c }

func TestUnauthenticated(t *testing.T) {
	e := newEnv(t)
	c := e.claims(t, nil)
	unknown := auth.NewToken()
	tests := []struct {
		desc   string
		values []string // authorization metadata values
		reason string
	}{
		{"no credentials", nil, auth.ReasonCredentialsMissing},
		{"unknown token", []string{"Bearer " + unknown}, auth.ReasonTokenUnknown},
		{"token of a hash (the file's value sent as a token)", []string{"Bearer " + auth.HashToken(hooksToken)}, auth.ReasonTokenUnknown},
		{"no scheme", []string{hooksToken}, auth.ReasonTokenMalformed},
		{"basic scheme", []string{"Basic " + hooksToken}, auth.ReasonTokenMalformed},
		{"empty bearer", []string{"Bearer "}, auth.ReasonTokenMalformed},
		{"oversized token", []string{"Bearer " + strings.Repeat("x", 4096)}, auth.ReasonTokenMalformed},
		{"two values", []string{"Bearer " + hooksToken, "Bearer " + opsToken}, auth.ReasonTokenMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			ctx := context.Background()
			for _, v := range tc.values {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", v)
			}
			before, writes := e.denied(t, tc.reason), e.store.Writes.Load()
			_, err := c.Claim(ctx, claimReq("billing", "evt_unauth"))
			wantRefused(t, "Claim", err, codes.Unauthenticated, tc.reason)
			if strings.Contains(err.Error(), hooksToken) || strings.Contains(err.Error(), unknown) || len(err.Error()) > 300 {
				t.Errorf("Claim error echoes the credentials or is long: %q", err)
			}
			if got := e.denied(t, tc.reason) - before; got != 1 {
				t.Errorf("claimd_auth_denied_total{reason=%q} moved by %v, want 1", tc.reason, got)
			}
			if e.store.Writes.Load() != writes {
				t.Errorf("a refused Claim reached the store")
			}
		})
	}
	// Nothing was written: an admin sees no record.
	_, err := c.Get(as(opsToken), &pb.GetRequest{Namespace: "billing", Provider: "stripe", Key: "evt_unauth"})
	if codeOf(err) != codes.NotFound {
		t.Errorf("Get(evt_unauth) as ops error = %v, want NotFound", err)
	}
	if got := len(e.logLines("call refused: unauthenticated")); got != len(tests) {
		t.Errorf("unauthenticated log lines = %d, want %d", got, len(tests))
	}
	e.noSecrets(t)
	if strings.Contains(e.logs.String(), unknown[3:]) {
		t.Errorf("logs carry the unknown token")
	}
}

// rpcs calls each ClaimService method in namespace ns on key; the fenced
// writes present token and secret (the owner's, from its ACQUIRED answer).
// It covers every method of the generated descriptor (TestRPCTableComplete).
func rpcs(c pb.ClaimServiceClient, ns, key string, token uint64, secret []byte) map[string]func(context.Context) error {
	return map[string]func(context.Context) error{
		"Claim": func(ctx context.Context) error {
			_, err := c.Claim(ctx, claimReq(ns, key))
			return err
		},
		"Transition": func(ctx context.Context) error {
			_, err := c.Transition(ctx, &pb.TransitionRequest{Namespace: ns, Provider: "stripe", Key: key, FencingToken: token, LeaseSecret: secret, To: pb.EventState_EVENT_STATE_PROCESSING})
			return err
		},
		"Renew": func(ctx context.Context) error {
			_, err := c.Renew(ctx, &pb.RenewRequest{Namespace: ns, Provider: "stripe", Key: key, FencingToken: token, LeaseSecret: secret, Lease: durationpb.New(120e9)})
			return err
		},
		"Release": func(ctx context.Context) error {
			_, err := c.Release(ctx, &pb.ReleaseRequest{Namespace: ns, Provider: "stripe", Key: key, FencingToken: token, LeaseSecret: secret})
			return err
		},
		"Get": func(ctx context.Context) error {
			_, err := c.Get(ctx, &pb.GetRequest{Namespace: ns, Provider: "stripe", Key: key})
			return err
		},
	}
}

func TestRPCTableComplete(t *testing.T) {
	calls := rpcs(nil, "", "", 0, nil)
	for _, m := range pb.ClaimService_ServiceDesc.Methods {
		if calls[m.MethodName] == nil {
			t.Errorf("ClaimService.%s has no case in rpcs(): the namespace and role tests would not cover it", m.MethodName)
		}
	}
}

// TestEveryRPCOutsideNamespace: a principal calling any ClaimService method
// in a namespace it does not hold is refused before the handler: nothing
// is written, the record an admin holds there is unchanged.
func TestEveryRPCOutsideNamespace(t *testing.T) {
	e := newEnv(t)
	c := e.claims(t, nil)
	// ops (admin, every namespace) holds a record in payments.
	held, err := c.Claim(as(opsToken), claimReq("payments", "evt_held"))
	if err != nil || held.GetOutcome() != pb.Outcome_OUTCOME_ACQUIRED {
		t.Fatalf("Claim(payments/evt_held) as ops = %v, %v", held, err)
	}
	get := func(key string) (*pb.GetResponse, error) {
		return c.Get(as(opsToken), &pb.GetRequest{Namespace: "payments", Provider: "stripe", Key: key})
	}
	before, err := get("evt_held")
	if err != nil {
		t.Fatal(err)
	}
	for _, who := range []struct{ name, token string }{{"billing-hooks", hooksToken}, {"billing-reader", readerToken}} {
		for method, call := range rpcs(c, "payments", "evt_held", held.GetFencingToken(), held.GetLeaseSecret()) {
			t.Run(who.name+"/"+method, func(t *testing.T) {
				denied, writes := e.denied(t, auth.ReasonNamespaceDenied), e.store.Writes.Load()
				if method != "Get" && who.name == "billing-reader" {
					denied = e.denied(t, auth.ReasonRoleDenied) // the role is checked first
				}
				err := call(as(who.token))
				reason := auth.ReasonNamespaceDenied
				if method != "Get" && who.name == "billing-reader" {
					reason = auth.ReasonRoleDenied
				}
				wantRefused(t, method, err, codes.PermissionDenied, reason)
				if got := e.denied(t, reason) - denied; got != 1 {
					t.Errorf("claimd_auth_denied_total{reason=%q} moved by %v, want 1", reason, got)
				}
				if e.store.Writes.Load() != writes {
					t.Errorf("%s outside its namespace reached the store", method)
				}
			})
		}
	}
	after, err := get("evt_held")
	if err != nil {
		t.Fatal(err)
	}
	if before.String() != after.String() {
		t.Errorf("the record changed under refused calls:\nbefore %v\nafter  %v", before, after)
	}
	if _, err := c.Claim(as(hooksToken), claimReq("payments", "evt_new")); codeOf(err) != codes.PermissionDenied {
		t.Errorf("Claim(payments/evt_new) as billing-hooks error = %v, want PermissionDenied", err)
	}
	if _, err := get("evt_new"); codeOf(err) != codes.NotFound {
		t.Errorf("Get(payments/evt_new) as ops after a refused Claim error = %v, want NotFound (nothing written)", err)
	}
	// Each refusal is logged with its principal and the namespace, never a token.
	lines := e.logLines("call refused")
	if len(lines) == 0 || !strings.Contains(lines[0], `"principal":"billing-`) || !strings.Contains(lines[0], `"namespace":"payments"`) {
		t.Errorf("refusal log lines = %q, want principal and namespace", lines)
	}
	e.noSecrets(t)
}

// TestNamespaceClipped: a huge namespace is clipped in the error and the
// log line.
func TestNamespaceClipped(t *testing.T) {
	e := newEnv(t)
	huge := strings.Repeat("n", 1<<20)
	_, err := e.claims(t, nil).Claim(as(hooksToken), claimReq(huge, "evt_1"))
	wantRefused(t, "Claim", err, codes.PermissionDenied, auth.ReasonNamespaceDenied)
	if len(err.Error()) > 300 || !strings.Contains(err.Error(), "(1048576 bytes)") {
		t.Errorf("Claim error is %d bytes (%.120q…), want a clipped namespace and its length", len(err.Error()), err.Error())
	}
	if n := len(e.logs.String()); n > 2000 || !strings.Contains(e.logs.String(), `"namespace_bytes":1048576`) {
		t.Errorf("logs after one refusal are %d bytes (%.300q), want the namespace clipped and its length", n, e.logs.String())
	}
}

// TestEveryRPCOutsideRole: each method needs its role; admin has them all.
func TestEveryRPCOutsideRole(t *testing.T) {
	e := newEnv(t)
	c := e.claims(t, nil)
	p := pb.NewProviderServiceClient(e.conn(t, nil))
	providerCalls := map[string]func(context.Context) error{
		"ListProviders": func(ctx context.Context) error {
			_, err := p.ListProviders(ctx, &pb.ListProvidersRequest{})
			return err
		},
		"GetProvider": func(ctx context.Context) error {
			_, err := p.GetProvider(ctx, &pb.GetProviderRequest{Name: "stripe"})
			return err
		},
	}
	for _, m := range pb.ProviderService_ServiceDesc.Methods {
		if providerCalls[m.MethodName] == nil {
			t.Fatalf("ProviderService.%s has no case here", m.MethodName)
		}
	}
	// A live record in billing, held by billing-hooks.
	held, err := c.Claim(as(hooksToken), claimReq("billing", "evt_role"))
	if err != nil {
		t.Fatal(err)
	}
	spiffeCert := e.clientCert(t, leaf{uris: []string{spiffeID}})
	spiffeClaims := e.claims(t, spiffeCert)
	spiffeProviders := pb.NewProviderServiceClient(e.conn(t, spiffeCert))
	claimRole := map[string]bool{"Claim": true, "Transition": true, "Renew": true, "Release": true}
	for method, call := range rpcs(c, "billing", "evt_role", held.GetFencingToken(), held.GetLeaseSecret()) {
		// billing-reader (read) may Get only.
		writes := e.store.Writes.Load()
		err := call(as(readerToken))
		switch {
		case claimRole[method]:
			wantRefused(t, method+" as billing-reader", err, codes.PermissionDenied, auth.ReasonRoleDenied)
			if e.store.Writes.Load() != writes {
				t.Errorf("%s as billing-reader reached the store", method)
			}
		case err != nil:
			t.Errorf("%s as billing-reader error = %v, want nil", method, err)
		}
	}
	// spiffe-hooks (claim, over mTLS) may not read.
	_, err = spiffeClaims.Get(context.Background(), &pb.GetRequest{Namespace: "billing", Provider: "stripe", Key: "evt_role"})
	wantRefused(t, "Get as spiffe-hooks", err, codes.PermissionDenied, auth.ReasonRoleDenied)
	for method := range providerCalls {
		_, err := spiffeProviders.ListProviders(context.Background(), &pb.ListProvidersRequest{})
		wantRefused(t, method+" as spiffe-hooks", err, codes.PermissionDenied, auth.ReasonRoleDenied)
	}
	// read and admin may read providers (no namespace involved).
	for _, tok := range []string{readerToken, opsToken} {
		for method, call := range providerCalls {
			if err := call(as(tok)); err != nil {
				t.Errorf("%s error = %v, want nil", method, err)
			}
		}
	}
	// The record is untouched, and admin may do everything to it.
	got, err := c.Get(as(opsToken), &pb.GetRequest{Namespace: "billing", Provider: "stripe", Key: "evt_role"})
	if err != nil || got.GetRecord().GetState() != pb.EventState_EVENT_STATE_RECEIVED {
		t.Errorf("Get(evt_role) as ops = %v, %v, want state RECEIVED (refused writes changed nothing)", got, err)
	}
	admin := rpcs(c, "billing", "evt_role", held.GetFencingToken(), held.GetLeaseSecret())
	for _, method := range []string{"Transition", "Renew", "Release", "Get", "Claim"} {
		if err := admin[method](as(opsToken)); err != nil {
			t.Errorf("%s as ops (admin) error = %v, want nil", method, err)
		}
	}
}

// TestUnlistedMethodRefused: a method the table does not list is refused to
// every principal, admin included (fail closed).
func TestUnlistedMethodRefused(t *testing.T) {
	e := newEnv(t)
	ic := e.a.UnaryServerInterceptor()
	handler := func(context.Context, any) (any, error) {
		t.Error("the handler of an unlisted method ran")
		return nil, nil
	}
	for _, method := range []string{"/idempotency.v1.ClaimService/Purge", "/idempotency.v1.AdminService/DropAll"} {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+opsToken))
		_, err := ic(ctx, claimReq("billing", "x"), &grpc.UnaryServerInfo{FullMethod: method}, handler)
		wantRefused(t, method, err, codes.PermissionDenied, auth.ReasonMethodDenied)
	}
}

func TestHealthOpenReflectionAuthenticated(t *testing.T) {
	e := newEnv(t)
	conn := e.conn(t, nil)
	if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("Health.Check without credentials error = %v, want nil (health stays open)", err)
	}
	list := func(ctx context.Context) ([]string, error) {
		stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
		if err != nil {
			return nil, err
		}
		// A refused stream ends before the request is sent: Send says io.EOF
		// and Recv the status.
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		res, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		var names []string
		for _, s := range res.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		return names, nil
	}
	_, err := list(context.Background())
	wantRefused(t, "ServerReflectionInfo without credentials", err, codes.Unauthenticated, auth.ReasonCredentialsMissing)
	names, err := list(as(readerToken))
	if err != nil || !strings.Contains(fmt.Sprint(names), "idempotency.v1.ClaimService") {
		t.Errorf("ServerReflectionInfo as billing-reader = %v, %v, want the services", names, err)
	}
}

func TestNamespaceLabel(t *testing.T) {
	e := newEnv(t)
	for ns, want := range map[string]string{
		"billing": "billing", "payouts-eu": "payouts-*", "payments": "*", "load": "load",
	} {
		if got := e.a.NamespaceLabel(ns); got != want {
			t.Errorf("NamespaceLabel(%q) = %q, want %q", ns, got, want)
		}
	}
	e.write(t, "version: 1\nprincipals:\n  a:\n    tokens: [\""+auth.HashToken(hooksToken)+"\"]\n    namespaces: [billing, \"pay-*\"]\n    roles: [claim]\n")
	if err := e.a.Reload(); err != nil {
		t.Fatal(err)
	}
	for ns, want := range map[string]string{"billing": "billing", "pay-x": "pay-*", "payments": "other"} {
		if got := e.a.NamespaceLabel(ns); got != want {
			t.Errorf("after reload NamespaceLabel(%q) = %q, want %q", ns, got, want)
		}
	}
}
