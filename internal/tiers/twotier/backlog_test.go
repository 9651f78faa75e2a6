package twotier_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

// The tests of this file hold the composition to Bug 7's rule when the fast
// tier refuses a repair outright: every write the durable tier holds reaches
// the fast tier, later if not at once.

// awaitPending waits until the backlog reports n repairs pending.
func (w *repairWorld) awaitPending(n int64) {
	w.t.Helper()
	deadline := time.After(10 * time.Second)
	for w.watch.pending.Load() != n {
		select {
		case <-w.watch.changed:
		case <-deadline:
			w.t.Fatalf("repairs pending = %d after 10s, want %d", w.watch.pending.Load(), n)
		}
	}
}

// awaitRetryWait waits until the backlog's goroutine sleeps on the fake
// clock, before a retry round.
func (w *repairWorld) awaitRetryWait() {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.clk.AwaitWaiters(ctx, 1); err != nil {
		w.t.Fatalf("the retries never waited on the clock: %v", err)
	}
}

// settleRefusedByFast is endUnheard with the owner's PROCESSING and
// SETTLED: the fast tier keeps the VALIDATED copy, and is left refusing.
func (w *repairWorld) settleRefusedByFast(k string) {
	w.t.Helper()
	w.endUnheard(k, func(ctx context.Context, token uint64) error {
		if _, err := w.transition(ctx, k, token, tiers.StateProcessing, nil); err != nil {
			return err
		}
		if changed, err := w.transition(ctx, k, token, tiers.StateSettled, []byte("receipt")); err != nil || !changed {
			return fmt.Errorf("Transition(%q →SETTLED) = changed %v, %v; want true", k, changed, err)
		}
		return nil
	})
}

// Bug (make chaos, redis-kill): after Redis restarted, one replica's
// refresh of a SETTLED failed (its Redis client still refused to dial) and
// was dropped; the other replica answered IN_PROGRESS held by the owner
// until the lease ended, after callers had been told DUPLICATE. The failed
// refresh is now retried: once the fast tier takes writes again, it holds
// the SETTLED record. The newest record of the key lands, not the
// PROCESSING one whose refresh failed first.
func TestRefusedSettleRepairIsRetried(t *testing.T) {
	runRepair(t, func(t *testing.T, w *repairWorld) {
		w.settleRefusedByFast("evt_retry")
		w.awaitPending(1)

		w.fast.failPut.Store(false)
		w.awaitRetryWait()
		w.clk.Advance(100 * time.Millisecond) // the default RepairRetryMin
		w.awaitPending(0)
		w.wantFastDuplicate("evt_retry", "receipt")
		if n := w.watch.dropped.Load(); n != 0 {
			t.Fatalf("repairs dropped = %d, want 0", n)
		}
	})
}

// While the fast tier keeps refusing, the retries back off (doubling from
// RepairRetryMin up to RepairRetryMax), and each round stops at its first
// failure: one Put per round, however many keys wait.
func TestRepairRetriesBackOff(t *testing.T) {
	cfg := twotier.Config{RepairRetryMin: 100 * time.Millisecond, RepairRetryMax: 400 * time.Millisecond}
	runRepairWith(t, cfg, func(t *testing.T, w *repairWorld) {
		for i := range 3 {
			w.settleRefusedByFast(fmt.Sprintf("evt_backoff_%d", i))
		}
		w.awaitPending(3)
		puts := w.fast.puts.Load()
		// The rounds come 100, 200, 400 and 400ms apart.
		for round, wait := range []time.Duration{100, 200, 400, 400} {
			wait *= time.Millisecond
			w.awaitRetryWait()
			w.clk.Advance(wait - time.Millisecond)
			w.awaitRetryWait()
			if got := w.fast.puts.Load(); got != puts {
				t.Fatalf("round %d: %d Puts %v after the last round, want none before %v", round, got-puts, wait-time.Millisecond, wait)
			}
			w.clk.Advance(time.Millisecond)
			w.awaitRetryWait() // the round failed, and the next wait began
			if got := w.fast.puts.Load(); got != puts+1 {
				t.Fatalf("round %d: %d Puts, want 1 (a round stops at its first failure)", round, got-puts)
			}
			puts++
		}
		w.fast.failPut.Store(false)
		w.clk.Advance(400 * time.Millisecond)
		w.awaitPending(0)
		for i := range 3 {
			w.wantFastDuplicate(fmt.Sprintf("evt_backoff_%d", i), "receipt")
		}
	})
}

// The backlog is bounded: beyond BacklogEntries keys the oldest is dropped,
// and counted; the ones kept still land.
func TestRepairBacklogDropsTheOldest(t *testing.T) {
	runRepairWith(t, twotier.Config{BacklogEntries: 2}, func(t *testing.T, w *repairWorld) {
		for i := range 3 {
			w.settleRefusedByFast(fmt.Sprintf("evt_bound_%d", i))
		}
		w.awaitPending(2)
		// Each key's SETTLED replaced its PROCESSING in the backlog: one
		// key, the first, was dropped.
		if n := w.watch.dropped.Load(); n != 1 {
			t.Fatalf("repairs dropped = %d, want 1", n)
		}
		w.fast.failPut.Store(false)
		w.awaitRetryWait()
		w.clk.Advance(100 * time.Millisecond)
		w.awaitPending(0)
		w.wantFastDuplicate("evt_bound_1", "receipt")
		w.wantFastDuplicate("evt_bound_2", "receipt")
		// The dropped key's fast tier keeps its older copy, which the
		// durable tier overrules (confirm): DUPLICATE, and the
		// copy repaired.
		w.wantStaleCopy("evt_bound_0")
		if other := w.claim(w.params("evt_bound_0", "pod-b", "")); other.Outcome != tiers.OutcomeDuplicate || other.ServedBy != tiers.TierDurable {
			t.Fatalf("Claim(the dropped key) = %v served by %v, want DUPLICATE served by DURABLE", other.Outcome, other.ServedBy)
		}
		w.wantFastDuplicate("evt_bound_0", "receipt")
	})
}

// Close makes one last round before it closes the tiers, and counts as
// dropped what still fails.
func TestCloseRetriesTheBacklogOnce(t *testing.T) {
	runRepair(t, func(t *testing.T, w *repairWorld) {
		w.settleRefusedByFast("evt_close_a")
		w.settleRefusedByFast("evt_close_b")
		w.awaitPending(2)
		w.fast.failPut.Store(false)
		puts := w.fast.puts.Load()
		if err := w.store.Close(); err != nil {
			t.Fatal(err)
		}
		if got, dropped := w.fast.puts.Load()-puts, w.watch.dropped.Load(); got != 2 || dropped != 0 {
			t.Fatalf("Close: %d Puts, %d dropped; want 2 and 0", got, dropped)
		}
	})
	runRepair(t, func(t *testing.T, w *repairWorld) {
		w.settleRefusedByFast("evt_close_c")
		w.settleRefusedByFast("evt_close_d")
		w.awaitPending(2)
		if err := w.store.Close(); err != nil {
			t.Fatal(err)
		}
		if p, dropped := w.watch.pending.Load(), w.watch.dropped.Load(); p != 0 || dropped != 2 {
			t.Fatalf("Close with the fast tier still refusing: %d pending, %d dropped; want 0 and 2", p, dropped)
		}
	})
}
