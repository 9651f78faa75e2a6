package twotier_test

import (
	"context"
	"crypto/sha256"
	"path/filepath"
	"testing"
	"time"

	"github.com/claimd/claimd/internal/clock"
	"github.com/claimd/claimd/internal/tiers"
	"github.com/claimd/claimd/internal/tiers/memory"
	"github.com/claimd/claimd/internal/tiers/sqlite"
	"github.com/claimd/claimd/internal/tiers/twotier"
)

// TestEntityClaimsAreOrderedByTheDurableTier holds the embedded pairing to
// the fast tier's part in lifecycles: a DEFERRED or SUPERSEDED answer
// leaves nothing in the fast tier (no copy, no marker), and an ACQUIRED
// for a lifecycle event always comes from the durable tier, even when the
// fast tier holds the acquisition it repeats.
func TestEntityClaimsAreOrderedByTheDurableTier(t *testing.T) {
	ctx := context.Background()
	lite, err := sqlite.New(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "claimd.db")})
	if err != nil {
		t.Fatal(err)
	}
	fast := memory.New(memory.Config{})
	s := twotier.New(fast, lite, twotier.Config{LocalEntries: -1})
	t.Cleanup(func() { s.Close() })
	clk := clock.NewFake(time.Now())
	event := func(k, attempt string, ev tiers.EntityEvent) tiers.ClaimParams {
		h := sha256.Sum256([]byte(k + attempt))
		return tiers.ClaimParams{Key: tiers.Key{Namespace: "ns", Provider: "stripe", Key: k}, Now: clk.Now(),
			Lease: time.Minute, TTL: time.Hour, Holder: "pod", AttemptID: attempt,
			Salt: make([]byte, tiers.SaltBytes), SecretHash: h[:], Entity: &ev}
	}
	processing := tiers.EntityEvent{Lifecycle: "pi", EntityID: "pi_1", EventType: "processing", Initial: "created",
		From: []string{"created"}, To: "processing"}
	succeeded := tiers.EntityEvent{Lifecycle: "pi", EntityID: "pi_1", EventType: "succeeded", Initial: "created",
		From: []string{"processing"}, Wait: []string{"created"}, To: "succeeded"}

	// The fast tier holds nothing for k: a Reserve there is a first one.
	wantFastEmpty := func(k string) {
		t.Helper()
		fr, err := fast.Reserve(ctx, tiers.ReserveParams{Key: tiers.Key{Namespace: "ns", Provider: "stripe", Key: k},
			Now: clk.Now(), Nonce: "probe-" + k, PendingTTL: time.Second})
		if err != nil || fr.Verdict != tiers.FastReserved {
			t.Fatalf("fast Reserve(%q) = verdict %d, %v; want FastReserved: the fast tier kept something", k, fr.Verdict, err)
		}
		if err := fast.Abort(ctx, tiers.Key{Namespace: "ns", Provider: "stripe", Key: k}, "probe-"+k); err != nil {
			t.Fatal(err)
		}
	}

	res, err := s.Claim(ctx, event("evt_succeeded", "", succeeded))
	if err != nil || res.Outcome != tiers.OutcomeDeferred || res.ServedBy != tiers.TierDurable {
		t.Fatalf("Claim(succeeded before processing) = %v by %v, %v; want DEFERRED by DURABLE", res.Outcome, res.ServedBy, err)
	}
	wantFastEmpty("evt_succeeded")

	first, err := s.Claim(ctx, event("evt_processing", "a1", processing))
	if err != nil || first.Outcome != tiers.OutcomeAcquired {
		t.Fatalf("Claim(processing) = %v, %v; want ACQUIRED", first.Outcome, err)
	}
	clk.Advance(time.Second)
	again, err := s.Claim(ctx, event("evt_processing", "a1", processing))
	if err != nil || again.Outcome != tiers.OutcomeAcquired || again.ServedBy != tiers.TierDurable ||
		again.Entity == nil || again.Entity.State != "created" || again.Record.Token != first.Record.Token {
		t.Fatalf("Claim(same attempt) = %v by %v entity %+v token %d, %v; want the same ACQUIRED by DURABLE, entity created",
			again.Outcome, again.ServedBy, again.Entity, again.Record.Token, err)
	}
	// A copy of the holder's acquisition may still answer another
	// attempt IN_PROGRESS: that admits nothing.
	other, err := s.Claim(ctx, event("evt_processing", "a2", processing))
	if err != nil || other.Outcome != tiers.OutcomeInProgress {
		t.Fatalf("Claim(another attempt) = %v, %v; want IN_PROGRESS", other.Outcome, err)
	}

	sec := first.Record.SecretHash
	for _, to := range []tiers.State{tiers.StateProcessing, tiers.StateSettled} {
		if _, _, err := s.Transition(ctx, tiers.TransitionParams{Key: first.Record.Key, Now: clk.Now(), Token: first.Record.Token,
			SecretHash: sec, To: to, Result: []byte("ok")}); err != nil {
			t.Fatalf("Transition(→%v) error = %v", to, err)
		}
	}
	stale := processing
	stale.EventType = "processing_again"
	res, err = s.Claim(ctx, event("evt_processing_again", "", stale))
	if err != nil || res.Outcome != tiers.OutcomeSuperseded {
		t.Fatalf("Claim(processing after processing) = %v, %v; want SUPERSEDED", res.Outcome, err)
	}
	wantFastEmpty("evt_processing_again")
	ent, err := s.GetEntity(ctx, tiers.EntityKey{Namespace: "ns", Provider: "stripe", Lifecycle: "pi", EntityID: "pi_1"})
	if err != nil || ent.State != "processing" || ent.Version != 1 {
		t.Fatalf("GetEntity through the pair = %q v%d, %v; want processing v1", ent.State, ent.Version, err)
	}
}
