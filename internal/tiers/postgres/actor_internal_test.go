package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/testenv"
	"github.com/claimd/claimd/internal/tiers"
)

// auditActor is what an audit_log row says about who asked.
type auditActor struct {
	Op, Principal, Transport string
}

func readAuditActors(t *testing.T, s *Store, k string) []auditActor {
	t.Helper()
	rows, _ := s.pool.Query(context.Background(), `SELECT op, principal, transport FROM audit_log
		WHERE namespace = $1 AND provider = $2 AND key = $3 ORDER BY id`,
		batchKey(k).Namespace, batchKey(k).Provider, k)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[auditActor])
	if err != nil {
		t.Fatalf("reading audit_log: %v", err)
	}
	return got
}

// TestAuditRowActor: each statement that writes an audit row writes the
// caller's tiers.Actor into it: claim_batch.sql (group commit of first
// claims), claim.sql (a takeover), audit_claim.sql (a claim answered from
// the stored row), transition_batch.sql, transition.sql, renew.sql and
// release.sql.
func TestAuditRowActor(t *testing.T) {
	ctx := context.Background()
	hooks := tiers.Actor{Principal: "hooks", Transport: "grpc"}
	ops := tiers.Actor{Principal: "ops", Transport: "http-rest"}
	withActor := func(p tiers.ClaimParams, a tiers.Actor) tiers.ClaimParams { p.Actor = a; return p }

	// Group commit: two first claims in one claim_batch.sql.
	batched, plain := pausedStore(t, testenv.Postgres(t, Migrate))
	clk := clock.NewFake(time.Now())
	run(batched, queue(t, batched, []tiers.ClaimParams{
		withActor(batchParams(clk, "evt_batch_hooks", "pod-a"), hooks),
		withActor(batchParams(clk, "evt_batch_ops", "pod-b"), ops),
	}))
	// claim.sql takes a released key over; audit_claim.sql records a claim
	// the stored row answers.
	first, err := plain.Claim(ctx, withActor(batchParams(clk, "evt_takeover", "pod-a"), hooks))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Release(ctx, tiers.ReleaseParams{Key: batchKey("evt_takeover"), Now: clk.Now(), Token: first.Record.Token,
		SecretHash: testHash, Actor: hooks}); err != nil {
		t.Fatalf("Release(evt_takeover) error = %v", err)
	}
	taken, err := plain.Claim(ctx, withActor(batchParams(clk, "evt_takeover", "pod-b"), ops))
	if err != nil || taken.Reason != tiers.ReasonReleased {
		t.Fatalf("Claim(evt_takeover) = %v/%v, %v; want ACQUIRED/RELEASED", taken.Outcome, taken.Reason, err)
	}
	if _, err := plain.Renew(ctx, tiers.RenewParams{Key: batchKey("evt_takeover"), Now: clk.Now(), Token: taken.Record.Token,
		SecretHash: testHash, Lease: batchTestLease, Actor: ops}); err != nil {
		t.Fatalf("Renew(evt_takeover) error = %v", err)
	}
	if res, err := plain.Claim(ctx, withActor(batchParams(clk, "evt_takeover", "pod-c"), hooks)); err != nil || res.Outcome != tiers.OutcomeInProgress {
		t.Fatalf("Claim(evt_takeover) again = %v, %v; want IN_PROGRESS", res.Outcome, err)
	}

	// transition.sql alone, then two transitions in one
	// transition_batch.sql.
	s, wclk, claim := pausedWrites(t, 0)
	alone := claim("evt_alone")
	p := tp(wclk, "evt_alone", alone.Token, tiers.StateProcessing)
	p.Actor = ops
	if _, err := s.durableTransitionNow(ctx, p); err != nil {
		t.Fatalf("Transition(evt_alone) error = %v", err)
	}
	transition := func(k string, token uint64, a tiers.Actor) func(context.Context) (tiers.Record, bool, error) {
		return func(ctx context.Context) (tiers.Record, bool, error) {
			p := tp(wclk, k, token, tiers.StateProcessing)
			p.Actor = a
			return s.Transition(ctx, p)
		}
	}
	one, two, left := claim("evt_tb_one"), claim("evt_tb_two"), claim("evt_tb_left")
	leftCtx, leave := context.WithCancel(ctx)
	calls := []*queuedCall{
		{desc: "hooks' transition", run: transition("evt_tb_one", one.Token, hooks)},
		{desc: "ops' transition", run: transition("evt_tb_two", two.Token, ops)},
		{desc: "caller left", run: func(context.Context) (tiers.Record, bool, error) {
			return transition("evt_tb_left", left.Token, ops)(leftCtx)
		}},
	}
	flushQueued(ctx, s, calls, leave, calls[2])
	if n := s.writes.transitionBatches.Load(); n != 1 {
		t.Fatalf("transition batches = %d, want one transition_batch.sql", n)
	}
	for _, c := range calls[:2] {
		if c.err != nil || !c.ch {
			t.Fatalf("%s: changed %v, %v; want changed", c.desc, c.ch, c.err)
		}
	}

	setup := auditActor{"claim", "", ""} // claims the test made without an actor
	tests := []struct {
		desc  string
		store *Store
		key   string
		want  []auditActor
	}{
		{"claim_batch.sql", batched, "evt_batch_hooks", []auditActor{{"claim", "hooks", "grpc"}}},
		{"claim_batch.sql, another actor in the same batch", batched, "evt_batch_ops", []auditActor{{"claim", "ops", "http-rest"}}},
		{"claim.sql, release.sql, a takeover, renew.sql, audit_claim.sql", plain, "evt_takeover", []auditActor{
			{"claim", "hooks", "grpc"}, {"release", "hooks", "grpc"}, {"claim", "ops", "http-rest"}, {"renew", "ops", "http-rest"},
			{"claim", "hooks", "grpc"}}},
		{"transition.sql", s, "evt_alone", []auditActor{setup, {"transition", "ops", "http-rest"}}},
		{"transition_batch.sql", s, "evt_tb_one", []auditActor{setup, {"transition", "hooks", "grpc"}}},
		{"transition_batch.sql, another actor in the same batch", s, "evt_tb_two", []auditActor{setup, {"transition", "ops", "http-rest"}}},
		{"a caller that left wrote nothing", s, "evt_tb_left", []auditActor{setup}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, readAuditActors(t, tc.store, tc.key)); diff != "" {
				t.Errorf("audit rows of %s (-want +got):\n%s", tc.key, diff)
			}
		})
	}
}
