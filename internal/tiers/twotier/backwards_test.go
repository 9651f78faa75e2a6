package twotier_test

import (
	"testing"
	"time"

	"github.com/claimd/claimd/internal/tiers"
)

// No answer goes back in time (issue 34, item 5). The owner's
// Transition(→PROCESSING) commits in the durable tier, but its caller's
// deadline passes first: the call fails, and the fast tier, whose refresh
// followed only a call that succeeded, keeps the VALIDATED copy. Under
// 0.2–5ms deadlines make chaos saw a later claim answered IN_PROGRESS with
// state RECEIVED, served by the fast tier, after other claims had been
// told PROCESSING by the durable tier.

// lostReply makes the durable tier's next Transition commit and then fail
// as a deadline that passed after the commit does.
func (w *repairWorld) lostReply() { w.durable.lostReply.Store(true) }

// committedUnheard claims k for pod-a, moves it to VALIDATED (which the
// fast tier hears of), then to PROCESSING in a call that commits and fails.
func (w *repairWorld) committedUnheard(k string) tiers.Record {
	w.t.Helper()
	rec := w.started(k, tiers.StateValidated)
	w.lostReply()
	if _, err := w.transition(w.ctx(), k, rec.Token, tiers.StateProcessing, nil); err == nil {
		w.t.Fatalf("Transition(%q →PROCESSING) with its reply lost = nil error, want the deadline", k)
	}
	cur, err := w.durable.Get(w.ctx(), rec.Key)
	if err != nil || cur.State != tiers.StateProcessing {
		w.t.Fatalf("durable record of %q = %v, %v; want PROCESSING (the transition committed)", k, cur.State, err)
	}
	return cur
}

// wantNotBefore checks a claim's answer against the durable record cur: an
// answer that carries a record in progress carries cur's state, token and
// holder, never an older state.
func (w *repairWorld) wantNotBefore(what string, res tiers.ClaimResult, cur tiers.Record) {
	w.t.Helper()
	got := res.Record
	if got.State != cur.State || got.Token != cur.Token || got.Holder != cur.Holder {
		w.t.Fatalf("%s = %v %v token %d held by %q (served by %v), want the durable record's %v token %d held by %q",
			what, res.Outcome, got.State, got.Token, got.Holder, res.ServedBy, cur.State, cur.Token, cur.Holder)
	}
}

func TestCommittedTransitionIsNeverAnsweredOlder(t *testing.T) {
	runRepair(t, func(t *testing.T, w *repairWorld) {
		cur := w.committedUnheard("evt_back")

		// Another delivery, and the owner's own retry with its attempt_id
		// (the same ACQUIRED): both carry PROCESSING, the row's state.
		other := w.claim(w.params("evt_back", "pod-b", ""))
		if other.Outcome != tiers.OutcomeInProgress {
			t.Fatalf("Claim by another caller = %v, want IN_PROGRESS", other.Outcome)
		}
		w.wantNotBefore("Claim by another caller", other, cur)
		again := w.claim(w.params("evt_back", "pod-a", "att-1"))
		if again.Outcome != tiers.OutcomeAcquired {
			t.Fatalf("owner's retry = %v, want ACQUIRED", again.Outcome)
		}
		w.wantNotBefore("owner's retry", again, cur)

		// The fast tier's copy is repaired from the row: asked directly,
		// it holds the row's version.
		copy, err := w.fast.Reserve(w.ctx(), tiers.ReserveParams{Key: cur.Key, Now: w.clk.Now(), Nonce: "look", PendingTTL: time.Second})
		if err != nil || copy.Record.Version != cur.Version || copy.Record.State != cur.State {
			t.Fatalf("fast tier's copy = %v version %d, %v; want %v version %d (repaired from the durable record)",
				copy.Record.State, copy.Record.Version, err, cur.State, cur.Version)
		}
	})
}

// The same, with the durable tier unreadable when the claim comes: a copy
// that cannot be confirmed is not answered (the claim fails UNAVAILABLE,
// as a claim does whenever the durable tier cannot decide), because it may
// be older than the row.
func TestUnconfirmedCopyIsNotAnswered(t *testing.T) {
	runRepair(t, func(t *testing.T, w *repairWorld) {
		cur := w.committedUnheard("evt_dark")
		w.fast.failPut.Store(true) // keep the copy as it was: no repair from the refresh
		w.durable.failGet.Store(true)
		res, err := w.store.Claim(w.ctx(), w.params("evt_dark", "pod-b", ""))
		w.durable.failGet.Store(false)
		w.fast.failPut.Store(false)
		if err == nil {
			w.wantNotBefore("Claim with the durable tier unreadable", res, cur)
		}
	})
}
