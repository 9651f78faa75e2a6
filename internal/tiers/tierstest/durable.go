package tierstest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/claimd/claimd/internal/tiers"
)

// DurableFactory is Factory for a Durable tier on its own.
type DurableFactory func(t *testing.T) func(t *testing.T) tiers.Durable

// RunDurable runs Run against the durable tier alone, then the cases only a
// Durable has: pruning, and Claim compared with tiers.Decide over a
// generated table (which a Fast tier in front would answer partly itself).
// Like Run's, the cases run in parallel.
func RunDurable(t *testing.T, f DurableFactory) {
	Run(t, func(t *testing.T) Opener {
		open := f(t)
		return func(t *testing.T) tiers.Store { return open(t) }
	})
	for _, tc := range slices.Concat(durableCases, durableInspectCases) {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			d := f(t)(t)
			t.Cleanup(func() { d.Close() })
			tc.run(t, d, &env{t: t, store: d, clk: newEnv0(), ns: "t" + randHex(6)})
		})
	}
}

var durableCases = []struct {
	desc string
	run  func(t *testing.T, d tiers.Durable, e *env)
}{
	{"prune deletes only records, entities and deferrals past their window, in bounded batches", func(t *testing.T, d tiers.Durable, e *env) {
		testPrune(t, d, e)
		testPruneEntities(t, d, e) // after testPrune, which deletes every old record: in turn, never at once
	}},
	{"every record meets every claim as tiers.Decide says", func(t *testing.T, _ tiers.Durable, e *env) { testClaimMatchesDecide(t, e) }},
}

// testPrune works ten years in the past: Prune deletes whatever window
// ended before its cutoff, in every namespace, and every other case's
// windows end after now, so this case may share its database with them.
func testPrune(t *testing.T, d tiers.Durable, e *env) {
	e.clk.Set(e.clk.Now().AddDate(-10, 0, 0))
	t0 := e.clk.Now()
	for _, k := range []string{"old1", "old2", "old3"} {
		e.mustOutcome(e.params(k), tiers.OutcomeAcquired, tiers.ReasonNew)
	}
	e.clk.Set(t0.Add(50 * time.Hour))
	e.mustOutcome(e.params("young"), tiers.OutcomeAcquired, tiers.ReasonNew)

	cutoff := t0.Add(stripeTTL + time.Hour)
	n, err := d.Prune(e.ctx(), cutoff, 2)
	if err != nil || n != 2 {
		t.Fatalf("Prune(limit 2) = %d, %v; want 2, nil", n, err)
	}
	n, err = d.Prune(e.ctx(), cutoff, 100)
	if err != nil || n != 1 {
		t.Fatalf("Prune(rest) = %d, %v; want 1, nil", n, err)
	}
	for _, k := range []string{"old1", "old2", "old3"} {
		_, err := d.Get(e.ctx(), e.key(k))
		wantErr(t, "Get(pruned "+k+")", err, tiers.ErrNotFound)
	}
	if _, err := d.Get(e.ctx(), e.key("young")); err != nil {
		t.Fatalf("Get(young) error = %v; a record within its window must stay", err)
	}
	// A pruned key is new again.
	e.clk.Set(cutoff)
	e.mustOutcome(e.params("old1"), tiers.OutcomeAcquired, tiers.ReasonNew)
}

// testPruneEntities works ten years in the past, after testPrune (whose
// Prune would delete its records at any moment): entities go once every
// window of their claims and deferrals is over, with their applied events;
// deferral rows once their last delivery's window is; CountPrunable counts
// each kind before, and PruneEntities deletes in bounded batches.
func testPruneEntities(t *testing.T, d tiers.Durable, e *env) {
	pr, ok := d.(tiers.EntityPruner)
	if !ok {
		t.Fatalf("%T keeps entities but does not implement tiers.EntityPruner", d)
	}
	e.clk.Set(e.clk.Now().Add(1000 * time.Hour)) // past every window testPrune opened
	t0 := e.clk.Now()
	e.apply("pk_old", "pi_old", evProcessing, "created") // entity and one applied event
	e.ordered(e.event("pk_old_d", "pi_old", evRefunded), tiers.OutcomeDeferred, "processing", "", 1)
	e.ordered(e.event("pk_gone_d", "pi_gone", evSucceeded), tiers.OutcomeDeferred, "created", "", 1) // no entity row
	e.apply("pk_kept", "pi_kept", evProcessing, "created")
	e.clk.Set(t0.Add(50 * time.Hour))
	// A deferral keeps its entity as long as its own window, and so does
	// a claim that acquires an entity.
	e.ordered(e.event("pk_kept_d", "pi_kept", evRefunded), tiers.OutcomeDeferred, "processing", "", 1)
	e.acquire(e.event("pk_young", "pi_young", evProcessing), "created")

	cutoff := t0.Add(stripeTTL + time.Hour) // past t0's windows, within those of t0+50h
	// Records: pk_old, pk_kept, and testPrune's young and old1.
	want := tiers.Pruned{Claims: 4, Entities: 1, EntityEvents: 1, Deferrals: 2}
	got, err := pr.CountPrunable(e.ctx(), cutoff)
	if err != nil {
		t.Fatalf("CountPrunable() error = %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CountPrunable() (-want +got):\n%s", diff)
	}
	for _, step := range []struct {
		limit int
		want  tiers.Pruned
	}{
		{1, tiers.Pruned{Entities: 1, EntityEvents: 1, Deferrals: 1}},
		{100, tiers.Pruned{Deferrals: 1}},
		{100, tiers.Pruned{}},
	} {
		got, err := pr.PruneEntities(e.ctx(), cutoff, step.limit)
		if err != nil {
			t.Fatalf("PruneEntities(limit %d) error = %v", step.limit, err)
		}
		if diff := cmp.Diff(step.want, got); diff != "" {
			t.Errorf("PruneEntities(limit %d) (-want +got):\n%s", step.limit, diff)
		}
	}
	if _, err := e.entities().GetEntity(e.ctx(), e.entityKey("pi_old")); !errors.Is(err, tiers.ErrEntityNotFound) {
		t.Errorf("GetEntity(pi_old) after the prune error = %v, want ErrEntityNotFound", err)
	}
	e.wantEntity("pi_kept", "processing", 1, "")
	e.wantEntity("pi_young", "created", 0, "pk_young")
	events, _, err := e.entities().ListDeferred(e.ctx(), tiers.ListDeferredParams{Namespace: e.ns, Provider: "stripe"})
	if err != nil || len(events) != 1 || events[0].Key != "pk_kept_d" {
		t.Errorf("ListDeferred() after the prune = %+v, %v; want only pk_kept_d", events, err)
	}
	if got, err := pr.CountPrunable(e.ctx(), cutoff); err != nil || got != (tiers.Pruned{Claims: 4}) {
		t.Errorf("CountPrunable() after the prune = %+v, %v; want the 4 records only", got, err)
	}
	// A pruned entity starts over from its initial state.
	e.acquire(e.event("pk_old_again", "pi_old", evProcessing), "created")
}
