package tierstest

import (
	"testing"
	"time"

	"github.com/claimd/claimd/internal/tiers"
)

// DurableFactory is Factory for a Durable tier on its own.
type DurableFactory func(t *testing.T) func(t *testing.T) tiers.Durable

// RunDurable runs Run against the durable tier alone, then the cases only a
// Durable has (pruning).
func RunDurable(t *testing.T, f DurableFactory) {
	Run(t, func(t *testing.T) Opener {
		open := f(t)
		return func(t *testing.T) tiers.Store { return open(t) }
	})
	t.Run("prune deletes only records past their window, in bounded batches", func(t *testing.T) {
		open := f(t)
		d := open(t)
		t.Cleanup(func() { d.Close() })
		e := &env{t: t, store: d, clk: newEnv0(), ns: "t" + randHex(6)}
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
	})
}
