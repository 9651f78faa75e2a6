package tierstest

import (
	"slices"
	"testing"
	"time"

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
	{"prune deletes only records past their window, in bounded batches", testPrune},
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
