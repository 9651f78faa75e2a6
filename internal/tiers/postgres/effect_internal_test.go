package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/claimd/claimd/internal/tiers"
)

// transitionAudit is an audit_log row of a transition: the state it wrote
// and whether an earlier holder's effect fence supplied its result.
type transitionAudit struct {
	State           int16
	EffectRecovered bool
}

func readTransitionAudit(t *testing.T, s *Store, k string) []transitionAudit {
	t.Helper()
	rows, _ := s.pool.Query(context.Background(), `SELECT state, effect_recovered FROM audit_log
		WHERE namespace = $1 AND provider = $2 AND key = $3 AND op = 'transition' ORDER BY id`,
		batchKey(k).Namespace, batchKey(k).Provider, k)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[transitionAudit])
	if err != nil {
		t.Fatalf("reading audit_log: %v", err)
	}
	return got
}

// recoveredSettle is tp's settle of k with TransitionParams.EffectRecovered
// set as recovered.
func recoveredSettle(p tiers.TransitionParams, recovered bool) tiers.TransitionParams {
	p.EffectRecovered = recovered
	return p
}

// TestAuditRowEffectRecovered: the audit row of a settle says whether its
// result came from an earlier holder's effect fence, on each statement a
// transition may run as: transition.sql alone, and one row of
// transition_batch.sql among others. A repeat writes no row. Both claims
// layouts run it.
func TestAuditRowEffectRecovered(t *testing.T) {
	for _, partitions := range []int{0, 4} {
		t.Run(fmt.Sprintf("partitions=%d", partitions), func(t *testing.T) { testAuditRowEffectRecovered(t, partitions) })
	}
}

func testAuditRowEffectRecovered(t *testing.T, partitions int) {
	ctx := context.Background()
	s, clk, claim := pausedWrites(t, partitions)
	alone := claim("evt_alone", tiers.StateProcessing)
	aloneOwn := claim("evt_alone_own", tiers.StateProcessing)
	batched := claim("evt_batched", tiers.StateProcessing)
	batchedOwn := claim("evt_batched_own", tiers.StateProcessing)
	left := claim("evt_left", tiers.StateProcessing)

	// transition.sql, without the batcher.
	for _, c := range []struct {
		k         string
		token     uint64
		recovered bool
	}{{"evt_alone", alone.Token, true}, {"evt_alone_own", aloneOwn.Token, false}, {"evt_alone", alone.Token, true}} {
		if _, err := s.durableTransitionNow(ctx, recoveredSettle(tp(clk, c.k, c.token, tiers.StateSettled), c.recovered)); err != nil {
			t.Fatalf("Transition(%q →SETTLED, effect recovered %v) error = %v", c.k, c.recovered, err)
		}
	}

	// transition_batch.sql: two settles of distinct keys queued together.
	settle := func(k string, token uint64, recovered bool) func(context.Context) (tiers.Record, bool, error) {
		return func(ctx context.Context) (tiers.Record, bool, error) {
			return s.Transition(ctx, recoveredSettle(tp(clk, k, token, tiers.StateSettled), recovered))
		}
	}
	leftCtx, leave := context.WithCancel(ctx)
	calls := []*queuedCall{
		{desc: "recovered settle", run: settle("evt_batched", batched.Token, true)},
		{desc: "the holder's own settle", run: settle("evt_batched_own", batchedOwn.Token, false)},
		{desc: "caller left", run: func(context.Context) (tiers.Record, bool, error) {
			return s.Transition(leftCtx, recoveredSettle(tp(clk, "evt_left", left.Token, tiers.StateSettled), true))
		}},
	}
	flushQueued(ctx, s, calls, leave, calls[2])
	if n, tn := s.writes.batches.Load(), s.writes.transitionBatches.Load(); n != 1 || tn != 1 {
		t.Fatalf("write batches = %d (%d of transitions only), want one transition_batch.sql", n, tn)
	}
	for _, c := range calls[:2] {
		if c.err != nil || !c.ch {
			t.Fatalf("%s: changed %v, %v; want changed", c.desc, c.ch, c.err)
		}
	}

	processing, settled := int16(tiers.StateProcessing), int16(tiers.StateSettled)
	tests := []struct {
		desc string
		key  string
		want []transitionAudit
	}{
		{"transition.sql, recovered; its repeat writes no row", "evt_alone", []transitionAudit{{processing, false}, {settled, true}}},
		{"transition.sql, the holder's own result", "evt_alone_own", []transitionAudit{{processing, false}, {settled, false}}},
		{"transition_batch.sql, recovered", "evt_batched", []transitionAudit{{processing, false}, {settled, true}}},
		{"transition_batch.sql, the holder's own result", "evt_batched_own", []transitionAudit{{processing, false}, {settled, false}}},
		{"a caller that left wrote nothing", "evt_left", []transitionAudit{{processing, false}}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, readTransitionAudit(t, s, tc.key)); diff != "" {
				t.Errorf("transition rows of %s in audit_log (-want +got):\n%s", tc.key, diff)
			}
		})
	}
}
