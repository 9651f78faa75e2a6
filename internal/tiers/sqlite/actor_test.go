package sqlite

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/internal/tiers"
)

// auditActor is what an audit_log row says about who asked.
type auditActor struct {
	Op, Principal, Transport string
}

func readAuditActors(t *testing.T, db *sql.DB, k string) []auditActor {
	return queryAll(t, db, func(a *auditActor) []any { return []any{&a.Op, &a.Principal, &a.Transport} },
		`SELECT op, principal, transport FROM audit_log WHERE key = ? ORDER BY id`, k)
}

// TestAuditRowsActor: every audit row names the tiers.Actor of the call
// that wrote it: a claim (acquired, and answered from the stored row), a
// transition, a renew and a release. A refused write writes no row.
func TestAuditRowsActor(t *testing.T) {
	s := newStore(t, tempPath(t))
	ctx := context.Background()
	hooks := tiers.Actor{Principal: "hooks", Transport: "grpc"}
	ops := tiers.Actor{Principal: "ops", Transport: "connect"}
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	p := claimAt("evt_1", at(0))
	p.Actor = hooks
	res := mustClaim(t, s, p)
	p.Holder, p.Actor, p.Now = "pod-b", ops, at(time.Second)
	if again := mustClaim(t, s, p); again.Outcome != tiers.OutcomeInProgress {
		t.Fatalf("Claim(evt_1) by pod-b = %v, want IN_PROGRESS", again.Outcome)
	}
	tok := res.Record.Token
	if _, _, err := s.Transition(ctx, tiers.TransitionParams{Key: key("evt_1"), Now: at(2 * time.Second), Token: tok, SecretHash: ownerHash,
		To: tiers.StateProcessing, Actor: ops}); err != nil {
		t.Fatalf("Transition(evt_1) error = %v", err)
	}
	if _, err := s.Renew(ctx, tiers.RenewParams{Key: key("evt_1"), Now: at(3 * time.Second), Token: tok, SecretHash: ownerHash,
		Lease: lease, Actor: hooks}); err != nil {
		t.Fatalf("Renew(evt_1) error = %v", err)
	}
	if _, err := s.Renew(ctx, tiers.RenewParams{Key: key("evt_1"), Now: at(3 * time.Second), Token: tok + 1, SecretHash: ownerHash,
		Lease: lease, Actor: ops}); err == nil {
		t.Fatal("Renew(evt_1) with a stale token: no error")
	}
	if _, err := s.Release(ctx, tiers.ReleaseParams{Key: key("evt_1"), Now: at(4 * time.Second), Token: tok, SecretHash: ownerHash,
		Actor: ops}); err != nil {
		t.Fatalf("Release(evt_1) error = %v", err)
	}
	want := []auditActor{
		{"claim", "hooks", "grpc"}, {"claim", "ops", "connect"},
		{"transition", "ops", "connect"}, {"renew", "hooks", "grpc"}, {"release", "ops", "connect"},
	}
	if diff := cmp.Diff(want, readAuditActors(t, s.r, "evt_1")); diff != "" {
		t.Errorf("audit rows of evt_1 (-want +got):\n%s", diff)
	}
}
