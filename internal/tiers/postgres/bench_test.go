package postgres_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/claimd/claimd/internal/tiers"
)

// BenchmarkClaimNew measures the first claim of a key: one INSERT with its
// audit row, one round trip.
func BenchmarkClaimNew(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	p := e.params("")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p.Key.Key = "evt_new_" + strconv.Itoa(i)
		res, err := e.store.Claim(ctx, p)
		if err != nil || res.Outcome != tiers.OutcomeAcquired {
			b.Fatalf("Claim(%q) = %v, %v; want ACQUIRED", p.Key.Key, res.Outcome, err)
		}
	}
}

// BenchmarkClaimDuplicate measures a retry of a settled key: the claim
// statement reads the settled row, then its DUPLICATE is audited.
func BenchmarkClaimDuplicate(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	settled(e, "evt_dup")
	p := e.params("evt_dup")
	b.ReportAllocs()
	for b.Loop() {
		res, err := e.store.Claim(ctx, p)
		if err != nil || res.Outcome != tiers.OutcomeDuplicate {
			b.Fatalf("Claim(%q) = %v, %v; want DUPLICATE", p.Key.Key, res.Outcome, err)
		}
	}
}

// BenchmarkClaimEntityNew measures the first claim of an event of a new
// entity: a transaction of its own (entity lock, savepoint, claim, hold,
// commit), outside group commit.
func BenchmarkClaimEntityNew(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		id := strconv.Itoa(i)
		p := e.entityParams("evt_new_"+id, "pi_"+id, "created")
		res, err := e.store.Claim(ctx, p)
		if err != nil || res.Outcome != tiers.OutcomeAcquired {
			b.Fatalf("Claim(%q) = %v, %v; want ACQUIRED", p.Key.Key, res.Outcome, err)
		}
	}
}

// BenchmarkClaimEntityDeferred measures a deferral: the acquisition is
// rolled back to its savepoint and the deferral row counted instead.
func BenchmarkClaimEntityDeferred(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	p := e.entityParams("evt_refund", "pi_deferred", "refunded")
	b.ReportAllocs()
	for b.Loop() {
		res, err := e.store.Claim(ctx, p)
		if err != nil || res.Outcome != tiers.OutcomeDeferred {
			b.Fatalf("Claim(%q) = %v, %v; want DEFERRED", p.Key.Key, res.Outcome, err)
		}
	}
}
