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
