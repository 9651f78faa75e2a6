package twotier_test

import (
	"testing"
	"time"

	"github.com/claimd/claimd/internal/tiers"
)

// The tests of this file hold the composition to what a first claim leaves
// in the fast tier, on both pairings: its pending marker, standing for the
// new record's lease, and no copy of the record (one fast-tier round trip
// per first delivery instead of two).

func TestFirstClaimLeavesItsMarkerForTheLease(t *testing.T) {
	runRepair(t, func(t *testing.T, w *repairWorld) {
		first := w.claim(w.params("evt_new", "pod-a", "att-1"))
		if first.Outcome != tiers.OutcomeAcquired || first.Reason != tiers.ReasonNew || first.ServedBy != tiers.TierDurable {
			t.Fatalf("first Claim = %v/%v served by %v, want ACQUIRED/NEW by DURABLE", first.Outcome, first.Reason, first.ServedBy)
		}
		if puts := w.fast.puts.Load(); puts != 0 {
			t.Fatalf("fast-tier Puts after a first claim = %d, want 0 (its marker stands for the record)", puts)
		}
		// Just before the lease ends the marker still stands: another
		// claim meets it and asks the durable tier.
		w.clk.Advance(time.Minute - time.Millisecond)
		probe := func(nonce string) tiers.FastResult {
			t.Helper()
			res, err := w.fast.Reserve(w.ctx(), tiers.ReserveParams{Key: first.Record.Key, Now: w.clk.Now(), Nonce: nonce, PendingTTL: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		if res := probe("probe-1"); res.Verdict != tiers.FastAskDurable || res.Marker == "" {
			t.Fatalf("Reserve one instant before the lease ends = verdict %d marker %q, want FastAskDurable naming the first claim's marker", res.Verdict, res.Marker)
		}
		// Once the lease is over, the marker has lapsed with it.
		w.clk.Advance(time.Millisecond)
		if res := probe("probe-2"); res.Verdict != tiers.FastReserved {
			t.Fatalf("Reserve at the end of the lease = verdict %d, want FastReserved (the marker lapsed)", res.Verdict)
		}
		if err := w.fast.Abort(w.ctx(), first.Record.Key, "probe-2"); err != nil {
			t.Fatal(err)
		}
		next := w.claim(w.params("evt_new", "pod-c", "att-3"))
		if next.Outcome != tiers.OutcomeAcquired || next.Reason != tiers.ReasonLeaseExpired || next.Record.Token != 2 {
			t.Fatalf("Claim after the lease = %v/%v token %d, want ACQUIRED/LEASE_EXPIRED token 2", next.Outcome, next.Reason, next.Record.Token)
		}
	})
}

func TestAskingClaimFillsTheFirstClaimsRecord(t *testing.T) {
	for _, attempt := range []string{"att-2", ""} {
		runRepair(t, func(t *testing.T, w *repairWorld) {
			w.claim(w.params("evt_fill", "pod-a", "att-1"))
			w.clk.Advance(time.Second)
			// Another delivery meets the owner's marker, asks the durable
			// tier and copies what it read over the marker.
			asked := w.claim(w.params("evt_fill", "pod-b", attempt))
			if asked.Outcome != tiers.OutcomeInProgress || asked.ServedBy != tiers.TierDurable || asked.Record.Holder != "pod-a" {
				t.Fatalf("Claim (attempt_id %q) = %v served by %v held by %q, want IN_PROGRESS by DURABLE held by pod-a",
					attempt, asked.Outcome, asked.ServedBy, asked.Record.Holder)
			}
			if fills := w.fast.fills.Load(); fills != 1 {
				t.Fatalf("fast-tier Fills = %d, want 1", fills)
			}
			// The next deliveries are answered by the copy.
			for _, next := range []string{"att-3", ""} {
				res := w.claim(w.params("evt_fill", "pod-c", next))
				if res.Outcome != tiers.OutcomeInProgress || res.ServedBy != tiers.TierFast || res.Record.Holder != "pod-a" {
					t.Fatalf("Claim (attempt_id %q) after the fill = %v served by %v held by %q, want IN_PROGRESS by FAST held by pod-a",
						next, res.Outcome, res.ServedBy, res.Record.Holder)
				}
			}
			w.wantOwnerAgain("evt_fill", asked)
		})
	}
}

// A read that lost the race with the owner's settle must not bring back the
// state before it: the fill lands only where the marker still stands.
func TestFillNeverUndoesTheSettle(t *testing.T) {
	runRepair(t, func(t *testing.T, w *repairWorld) {
		first := w.claim(w.params("evt_race", "pod-a", "att-1"))
		read, err := w.durable.Get(w.ctx(), first.Record.Key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.transition(w.ctx(), "evt_race", 1, tiers.StateProcessing, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := w.transition(w.ctx(), "evt_race", 1, tiers.StateSettled, []byte("receipt")); err != nil {
			t.Fatal(err)
		}
		// The in-progress copy read before the settle, filled over the
		// owner's marker (whatever its nonce: none stands any more).
		for _, nonce := range []string{"any", "other"} {
			if err := w.fast.Fill(w.ctx(), read, nonce); err != nil {
				t.Fatal(err)
			}
		}
		w.wantFastDuplicate("evt_race", "receipt")
	})
}

// A first claim that finds the record in the durable tier (the fast tier
// lost its copy) fills it over its own marker, so the key's next claims are
// answered by the fast tier again.
func TestFalseNegativeFillsOverItsOwnMarker(t *testing.T) {
	runRepair(t, func(t *testing.T, w *repairWorld) {
		if _, err := w.durable.Claim(w.ctx(), w.params("evt_lost", "pod-a", "att-1")); err != nil {
			t.Fatal(err)
		}
		w.clk.Advance(time.Second)
		res := w.claim(w.params("evt_lost", "pod-b", ""))
		if res.Outcome != tiers.OutcomeInProgress || res.ServedBy != tiers.TierDurable || res.Record.Holder != "pod-a" {
			t.Fatalf("Claim of a key only the durable tier holds = %v served by %v held by %q, want IN_PROGRESS by DURABLE held by pod-a",
				res.Outcome, res.ServedBy, res.Record.Holder)
		}
		again := w.claim(w.params("evt_lost", "pod-c", "att-3"))
		if again.Outcome != tiers.OutcomeInProgress || again.ServedBy != tiers.TierFast || again.Record.Holder != "pod-a" {
			t.Fatalf("the next Claim = %v served by %v held by %q, want IN_PROGRESS by FAST held by pod-a (the read filled in)",
				again.Outcome, again.ServedBy, again.Record.Holder)
		}
	})
}
