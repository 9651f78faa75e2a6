package auth_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
)

// TestInspectServiceNeedsReadInNamespace: ListClaims and ListAudit read
// what the namespace's claims did and who asked, so they take the read role
// in the request's namespace like Get: a stranger is unauthenticated, a
// principal without the namespace or with the claim role only (a webhook
// handler's) is refused before the handler, a reader of the namespace is
// let in.
func TestInspectServiceNeedsReadInNamespace(t *testing.T) {
	e := newEnv(t)
	calls := func(c pb.InspectServiceClient, ns string) map[string]func(context.Context) error {
		return map[string]func(context.Context) error{
			"ListClaims": func(ctx context.Context) error {
				_, err := c.ListClaims(ctx, &pb.ListClaimsRequest{Namespace: ns, Provider: "stripe"})
				return err
			},
			"ListAudit": func(ctx context.Context) error {
				_, err := c.ListAudit(ctx, &pb.ListAuditRequest{Namespace: ns, Provider: "stripe", Key: "evt_1"})
				return err
			},
		}
	}
	c := pb.NewInspectServiceClient(e.conn(t, nil))
	for _, m := range pb.InspectService_ServiceDesc.Methods {
		if calls(c, "")[m.MethodName] == nil {
			t.Fatalf("InspectService.%s has no case here", m.MethodName)
		}
	}
	spiffe := pb.NewInspectServiceClient(e.conn(t, e.clientCert(t, leaf{uris: []string{spiffeID}})))
	for method, call := range calls(c, "billing") {
		t.Run(method, func(t *testing.T) {
			wantRefused(t, method+" as a stranger", call(context.Background()), codes.Unauthenticated, auth.ReasonCredentialsMissing)
			wantRefused(t, method+" with an unknown token", call(as(auth.NewToken())), codes.Unauthenticated, auth.ReasonTokenUnknown)
			wantRefused(t, method+" as billing-reader in payments", calls(c, "payments")[method](as(readerToken)), codes.PermissionDenied, auth.ReasonNamespaceDenied)
			wantRefused(t, method+" as spiffe-hooks (claim only)", calls(spiffe, "billing")[method](context.Background()), codes.PermissionDenied, auth.ReasonRoleDenied)
			wantRefused(t, method+" with spiffe-hooks' token (claim only)", call(as(spiffeToken)), codes.PermissionDenied, auth.ReasonRoleDenied)

			e.seen.Store(nil)
			if err := call(as(readerToken)); codeOf(err) != codes.OK {
				t.Errorf("%s as billing-reader in billing error = %v, want OK", method, err)
			}
			if p := e.seen.Load(); p == nil || p.Name != "billing-reader" {
				t.Errorf("%s as billing-reader: the handler saw principal %v, want billing-reader", method, p)
			}
		})
	}
}
