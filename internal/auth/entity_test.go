package auth_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/claimd/claimd/gen/idempotency/v1"
	"github.com/claimd/claimd/internal/auth"
)

// TestEntityServiceNeedsReadInNamespace: ListDeferred and GetEntity read
// what the namespace's claims did, so they take the read role in the
// request's namespace like Get: a stranger is unauthenticated, a principal
// without the namespace or without the role is refused before the handler,
// a reader of the namespace is let in.
func TestEntityServiceNeedsReadInNamespace(t *testing.T) {
	e := newEnv(t)
	c := pb.NewEntityServiceClient(e.conn(t, nil))
	calls := func(ns string) map[string]func(context.Context) error {
		return map[string]func(context.Context) error{
			"ListDeferred": func(ctx context.Context) error {
				_, err := c.ListDeferred(ctx, &pb.ListDeferredRequest{Namespace: ns, Provider: "stripe"})
				return err
			},
			"GetEntity": func(ctx context.Context) error {
				_, err := c.GetEntity(ctx, &pb.GetEntityRequest{Namespace: ns, Provider: "stripe", Lifecycle: "charge", EntityId: "ch_1"})
				return err
			},
		}
	}
	for _, m := range pb.EntityService_ServiceDesc.Methods {
		if calls("")[m.MethodName] == nil {
			t.Fatalf("EntityService.%s has no case here", m.MethodName)
		}
	}
	spiffe := pb.NewEntityServiceClient(e.conn(t, e.clientCert(t, leaf{uris: []string{spiffeID}})))
	for method, call := range calls("billing") {
		t.Run(method, func(t *testing.T) {
			wantRefused(t, method+" as a stranger", call(context.Background()), codes.Unauthenticated, auth.ReasonCredentialsMissing)
			wantRefused(t, method+" with an unknown token", call(as(auth.NewToken())), codes.Unauthenticated, auth.ReasonTokenUnknown)
			wantRefused(t, method+" as billing-reader in payments", calls("payments")[method](as(readerToken)), codes.PermissionDenied, auth.ReasonNamespaceDenied)
			var spiffeErr error
			if method == "ListDeferred" {
				_, spiffeErr = spiffe.ListDeferred(context.Background(), &pb.ListDeferredRequest{Namespace: "billing", Provider: "stripe"})
			} else {
				_, spiffeErr = spiffe.GetEntity(context.Background(), &pb.GetEntityRequest{Namespace: "billing", Provider: "stripe", Lifecycle: "charge", EntityId: "ch_1"})
			}
			wantRefused(t, method+" as spiffe-hooks (claim only)", spiffeErr, codes.PermissionDenied, auth.ReasonRoleDenied)

			e.seen.Store(nil)
			// Let in: ListDeferred answers (an empty list), GetEntity
			// reaches the store, which has no such entity.
			err := call(as(readerToken))
			want := codes.OK
			if method == "GetEntity" {
				want = codes.NotFound
			}
			if codeOf(err) != want {
				t.Errorf("%s as billing-reader in billing error = %v, want %v", method, err, want)
			}
			if p := e.seen.Load(); p == nil || p.Name != "billing-reader" {
				t.Errorf("%s as billing-reader: the handler saw principal %v, want billing-reader", method, p)
			}
		})
	}
}
